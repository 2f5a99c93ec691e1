//! What each operation does with each field of its request. serde drops a field its model
//! does not name, so without this a field a route does not act on would be silently
//! ignored and the client would get an answer to a question it did not ask. Every request
//! model the routes read names, beside it, the fields it serves and the fields that the
//! spec or a client defines for the operation but the route does not act on; those are
//! refused (400, code 13, naming the field) when they carry a value. Fields nobody defines
//! are tolerated, as the spec asks (newer clients add fields), and logged once.
//!
//! `identity` (credentials in the body, used when no header carries any: `api::guard`),
//! `context` (the spec's request context: informational, its keys open-ended) and `id`
//! (checked against the path: `extract::Target`) are served by every route.

use std::collections::HashSet;
use std::sync::Mutex;

use serde::de::{DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

use crate::error::{Error, Result};

/// The fields one operation reads, by name as they travel.
pub struct Fields {
    /// The spec's name of the operation.
    pub op: &'static str,
    /// Fields the route reads and acts on (beyond `identity`, `context` and `id`).
    pub served: &'static [&'static str],
    /// Fields the spec or a client defines for the operation that the route does not act
    /// on, each with why: refused when they carry a value.
    pub refused: &'static [(&'static str, &'static str)],
    /// Whether the body is a bare map whose every key is data (schema metadata).
    pub open: bool,
}

/// Served by every route that takes a body.
pub const COMMON: &[&str] = &["identity", "context", "id"];

/// A request model with the fields it serves.
pub trait Request: DeserializeOwned + Default {
    const FIELDS: &'static Fields;
}

/// A value that asks for nothing: absent in all but name.
fn inert(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Number(_) | Value::Bool(true) => false,
    }
}

impl Fields {
    /// The refusal for a field that carries a value, if the operation does not serve it.
    pub fn refusal(&self, name: &str, value: &Value) -> Option<Error> {
        let (_, why) = self.refused.iter().find(|(n, _)| *n == name)?;
        if inert(value) {
            return None;
        }
        Some(Error::invalid(format!(
            "{} does not serve the field `{name}`: {why}",
            self.op
        )))
    }

    fn known(&self, name: &str) -> bool {
        self.open
            || COMMON.contains(&name)
            || self.served.contains(&name)
            || self.refused.iter().any(|(n, _)| *n == name)
    }

    /// Logs, once per operation and field, a field nobody defines for the operation.
    fn note_unknown(&self, name: &str) {
        static SEEN: Mutex<Option<HashSet<(String, String)>>> = Mutex::new(None);
        let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
        let seen = seen.get_or_insert_with(HashSet::new);
        if seen.len() < 1024 && seen.insert((self.op.to_string(), name.to_string())) {
            tracing::warn!(
                operation = self.op,
                field = name,
                "a request carried a field this operation does not define; it is ignored"
            );
        }
    }

    /// Checks the fields of a JSON body (an object; anything else is left to the model's
    /// own parse to refuse). The first refused field with a value is the answer.
    pub fn check_json(&'static self, text: &str) -> Result<()> {
        if self.open {
            return Ok(());
        }
        let mut de = serde_json::Deserializer::from_str(text);
        match Scan(self).deserialize(&mut de) {
            Ok(None) => Ok(()),
            Ok(Some(refusal)) => Err(refusal),
            // Not JSON the model would take either: its own parse says why.
            Err(_) => Ok(()),
        }
    }

    /// Checks the keys of a query string (`delimiter` is every route's).
    pub fn check_query(&'static self, query: Option<&str>) -> Result<()> {
        for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            if key == "delimiter" {
                continue;
            }
            let value = Value::String(value.into_owned());
            if let Some(refusal) = self.refusal(&key, &value) {
                return Err(refusal);
            }
            if !self.known(&key) {
                self.note_unknown(&key);
            }
        }
        Ok(())
    }
}

/// Walks a JSON object's keys, reading only the values of refused fields.
struct Scan(&'static Fields);

impl<'de> DeserializeSeed<'de> for Scan {
    type Value = Option<Error>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Scan {
    type Value = Option<Error>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            if self.0.refused.iter().any(|(n, _)| *n == key) {
                let value: Value = map.next_value()?;
                if found.is_none() {
                    found = self.0.refusal(&key, &value);
                }
            } else {
                map.next_value::<IgnoredAny>()?;
                if !self.0.known(&key) {
                    self.0.note_unknown(&key);
                }
            }
        }
        Ok(found)
    }

    // Anything but an object is no field list: the model's parse answers it.
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

/// Declares what a request model serves:
/// `fields!(Type, "Operation", served: [...], refused: [("field", "why"), ...]);`
#[macro_export]
macro_rules! fields {
    ($ty:ty, $op:literal, served: [$($s:literal),* $(,)?] $(, refused: [$(($r:literal, $why:literal)),* $(,)?])? $(,)?) => {
        impl $crate::api::fields::Request for $ty {
            const FIELDS: &'static $crate::api::fields::Fields = &$crate::api::fields::Fields {
                op: $op,
                served: &[$($s),*],
                refused: &[$($(($r, $why)),*)?],
                open: false,
            };
        }
    };
}

/// The names of a model's fields as serde reads them (the `fields` its derived
/// `Deserialize` hands to `deserialize_struct`): for checking, in tests, that a model's
/// field list covers the spec's.
pub fn struct_fields<T: DeserializeOwned>() -> &'static [&'static str] {
    struct Probe(Option<&'static [&'static str]>);
    #[derive(Debug)]
    struct Stop;
    impl std::fmt::Display for Stop {
        fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("stop")
        }
    }
    impl std::error::Error for Stop {}
    impl serde::de::Error for Stop {
        fn custom<M: std::fmt::Display>(_: M) -> Self {
            Stop
        }
    }
    impl<'de> serde::Deserializer<'de> for &mut Probe {
        type Error = Stop;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(Stop)
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Stop> {
            self.0 = Some(fields);
            Err(Stop)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }
    let mut probe = Probe(None);
    let _ = T::deserialize(&mut probe);
    probe.0.unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Default)]
    struct Model {
        #[allow(dead_code)]
        a: Option<i64>,
    }
    fields!(Model, "Op", served: ["a"], refused: [("b", "b is not kept")]);

    #[test]
    fn refused_fields_with_a_value_are_refused_by_name() {
        let f = <Model as Request>::FIELDS;
        assert!(f.check_json(r#"{"a": 1, "zzz": 2}"#).is_ok());
        for inert in [
            r#"{"b": null}"#,
            r#"{"b": false}"#,
            r#"{"b": ""}"#,
            r#"{"b": []}"#,
            r#"{"b": {}}"#,
        ] {
            assert!(f.check_json(inert).is_ok(), "{inert}");
        }
        let e = f.check_json(r#"{"a": 1, "b": {"x": 1}}"#).unwrap_err();
        assert_eq!(e.code, crate::error::Code::InvalidInput);
        assert!(e.message.contains("`b`"), "{}", e.message);
        assert!(f.check_query(Some("delimiter=%24&b=1")).is_err());
        assert!(f.check_query(Some("delimiter=%24&a=1&b=")).is_ok());
        // Not an object: left to the model's parse.
        assert!(f.check_json("[1, 2]").is_ok());
        assert!(f.check_json("{").is_ok());
    }

    #[test]
    fn field_names_are_read_off_the_model() {
        assert_eq!(struct_fields::<Model>(), &["a"]);
        let describe = struct_fields::<lance_namespace::models::DescribeTableRequest>();
        assert!(describe.contains(&"load_detailed_metadata"), "{describe:?}");
    }
}

/// Every route's model against the spec's: each field the spec defines for the operation is
/// served or refused (a lance-namespace upgrade that adds one fails here, not silently),
/// and each field a route says it serves is one its model reads.
#[cfg(test)]
mod coverage {
    use super::*;
    use crate::api::data::{indices, reads, refs, rows, schema};
    use crate::api::{namespace, table};
    use lance_namespace::models as spec;

    struct Case {
        fields: &'static Fields,
        spec: &'static [&'static str],
        /// The fields our model reads, when serde can tell (not for hand-parsed ones).
        ours: Option<&'static [&'static str]>,
        /// The spec's fields that travel in the path, not in this model.
        in_path: &'static [&'static str],
    }

    fn case<T: Request, S: DeserializeOwned>(in_path: &'static [&'static str]) -> Case {
        Case {
            fields: T::FIELDS,
            spec: struct_fields::<S>(),
            ours: Some(struct_fields::<T>()),
            in_path,
        }
    }

    fn hand_parsed<T: Request, S: DeserializeOwned>(in_path: &'static [&'static str]) -> Case {
        Case {
            ours: None,
            ..case::<T, S>(in_path)
        }
    }

    const QUERY: &[&str] = &["identity", "context", "id"];

    fn cases() -> Vec<Case> {
        vec![
            case::<spec::CreateNamespaceRequest, spec::CreateNamespaceRequest>(&[]),
            case::<spec::DescribeNamespaceRequest, spec::DescribeNamespaceRequest>(&[]),
            case::<spec::DropNamespaceRequest, spec::DropNamespaceRequest>(&[]),
            case::<spec::NamespaceExistsRequest, spec::NamespaceExistsRequest>(&[]),
            case::<namespace::PageQuery, spec::ListNamespacesRequest>(QUERY),
            case::<namespace::PageQuery, spec::ListTablesRequest>(QUERY),
            case::<spec::DeclareTableRequest, spec::DeclareTableRequest>(&[]),
            case::<spec::RegisterTableRequest, spec::RegisterTableRequest>(&[]),
            case::<spec::DescribeTableRequest, spec::DescribeTableRequest>(&[]),
            case::<spec::TableExistsRequest, spec::TableExistsRequest>(&[]),
            case::<spec::DropTableRequest, spec::DropTableRequest>(&[]),
            case::<spec::DeregisterTableRequest, spec::DeregisterTableRequest>(&[]),
            case::<table::RenameBody, spec::RenameTableRequest>(&[]),
            case::<rows::CreateQuery, spec::CreateTableRequest>(QUERY),
            case::<rows::InsertQuery, spec::InsertIntoTableRequest>(QUERY),
            case::<rows::UpdateBody, spec::UpdateTableRequest>(&[]),
            case::<rows::DeleteBody, spec::DeleteFromTableRequest>(&[]),
            case::<crate::data::read::Query, spec::QueryTableRequest>(&[]),
            case::<reads::CountBody, spec::CountTableRowsRequest>(&[]),
            case::<reads::ExplainBody, spec::ExplainTableQueryPlanRequest>(&[]),
            case::<reads::AnalyzeBody, spec::AnalyzeTableQueryPlanRequest>(&[]),
            case::<reads::StatsBody, spec::GetTableStatsRequest>(&[]),
            case::<refs::VersionPaging, spec::ListTableVersionsRequest>(&[]),
            case::<refs::NamePaging, spec::ListTableTagsRequest>(&[]),
            case::<refs::BranchPaging, spec::ListTableBranchesRequest>(&[]),
            case::<refs::VersionBody, spec::DescribeTableVersionRequest>(&[]),
            case::<refs::RestoreBody, spec::RestoreTableRequest>(&[]),
            case::<refs::TagName, spec::GetTableTagVersionRequest>(&[]),
            case::<refs::TagDelete, spec::DeleteTableTagRequest>(&[]),
            case::<refs::TagSet, spec::CreateTableTagRequest>(&[]),
            case::<refs::TagUpdate, spec::UpdateTableTagRequest>(&[]),
            case::<refs::BranchCreate, spec::CreateTableBranchRequest>(&[]),
            case::<refs::BranchDelete, spec::DeleteTableBranchRequest>(&[]),
            hand_parsed::<indices::IndexBody, spec::CreateTableIndexRequest>(&[]),
            hand_parsed::<indices::ScalarIndexBody, spec::CreateTableIndexRequest>(&[]),
            case::<indices::IndexListBody, spec::ListTableIndicesRequest>(&[]),
            case::<indices::IndexStatsBody, spec::DescribeTableIndexStatsRequest>(&[]),
            case::<indices::DropIndexBody, spec::DropTableIndexRequest>(&[]),
            case::<schema::AddColumnsBody, spec::AlterTableAddColumnsRequest>(&[]),
            case::<schema::AlterColumnsBody, spec::AlterTableAlterColumnsRequest>(&[]),
            case::<schema::DropColumnsBody, spec::AlterTableDropColumnsRequest>(&[]),
            case::<schema::FieldMetadataBody, spec::UpdateFieldMetadataRequest>(&[]),
            case::<spec::CreateTableVersionRequest, spec::CreateTableVersionRequest>(&[]),
            case::<spec::BatchDeleteTableVersionsRequest, spec::BatchDeleteTableVersionsRequest>(
                &[],
            ),
            case::<spec::BatchCreateTableVersionsRequest, spec::BatchCreateTableVersionsRequest>(
                &[],
            ),
            case::<spec::BatchCommitTablesRequest, spec::BatchCommitTablesRequest>(&[]),
            case::<spec::DescribeTransactionRequest, spec::DescribeTransactionRequest>(&[]),
            case::<spec::AlterTransactionRequest, spec::AlterTransactionRequest>(&[]),
        ]
    }

    #[test]
    fn every_spec_field_is_served_or_refused() {
        for c in cases() {
            assert!(!c.spec.is_empty(), "{}: no spec fields read", c.fields.op);
            for field in c.spec {
                if c.in_path.contains(field) {
                    continue;
                }
                assert!(
                    c.fields.known(field),
                    "{}: the spec's field `{field}` is neither served nor refused",
                    c.fields.op
                );
            }
            if let Some(ours) = c.ours {
                for field in c.fields.served {
                    assert!(
                        ours.contains(field),
                        "{}: `{field}` is listed as served but the model does not read it ({ours:?})",
                        c.fields.op
                    );
                }
                if c.spec.contains(&"id") && !c.in_path.contains(&"id") {
                    assert!(
                        ours.contains(&"id"),
                        "{}: the body's id is not read, so it is not checked against the path",
                        c.fields.op
                    );
                }
            }
        }
    }
}
