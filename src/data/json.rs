//! A query's answer as JSON, for people and browsers (QueryTable with `Accept:
//! application/json`): `{"columns": [{"name", "type"}], "rows": [{column: value}]}`.
//!
//! Numbers, booleans and strings are JSON's own (a 64-bit integer beyond 2^53, which
//! JavaScript would round, is a string); lists, vectors among them, are arrays and structs
//! objects; binary values are `{"bytes": <length>}`, their contents left out; every other
//! type (times, dates, decimals, ...) is Arrow's text form of the value. Arrow IPC stays the
//! answer for clients that read the data.

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::DataType;
use serde_json::{Map, Value};

/// The rows of `batches` (all of one schema) as JSON.
pub fn rows(schema: &arrow_schema::Schema, batches: &[RecordBatch]) -> Value {
    let columns: Vec<Value> = schema
        .fields()
        .iter()
        .map(|f| serde_json::json!({ "name": f.name(), "type": f.data_type().to_string() }))
        .collect();
    let mut rows = Vec::new();
    for batch in batches {
        for i in 0..batch.num_rows() {
            let mut row = Map::with_capacity(batch.num_columns());
            for (field, column) in schema.fields().iter().zip(batch.columns()) {
                row.insert(field.name().clone(), value(column.as_ref(), i));
            }
            rows.push(Value::Object(row));
        }
    }
    serde_json::json!({ "columns": columns, "rows": rows })
}

/// JavaScript's largest exact integer.
const EXACT: i128 = 1 << 53;

fn value(array: &dyn Array, i: usize) -> Value {
    if array.is_null(i) {
        return Value::Null;
    }
    match array.data_type() {
        DataType::Boolean => Value::Bool(array.as_boolean().value(i)),
        DataType::Utf8 => Value::String(array.as_string::<i32>().value(i).to_string()),
        DataType::LargeUtf8 => Value::String(array.as_string::<i64>().value(i).to_string()),
        DataType::Utf8View => Value::String(array.as_string_view().value(i).to_string()),
        DataType::Binary => bytes(array.as_binary::<i32>().value(i).len()),
        DataType::LargeBinary => bytes(array.as_binary::<i64>().value(i).len()),
        DataType::BinaryView => bytes(array.as_binary_view().value(i).len()),
        DataType::FixedSizeBinary(n) => bytes(*n as usize),
        DataType::FixedSizeList(..) => list(array.as_fixed_size_list().value(i).as_ref()),
        DataType::List(_) => list(array.as_list::<i32>().value(i).as_ref()),
        DataType::LargeList(_) => list(array.as_list::<i64>().value(i).as_ref()),
        DataType::Struct(fields) => {
            let s = array.as_struct();
            let mut object = Map::with_capacity(fields.len());
            for (field, column) in fields.iter().zip(s.columns()) {
                object.insert(field.name().clone(), value(column.as_ref(), i));
            }
            Value::Object(object)
        }
        t if t.is_integer() => {
            let text = text(array, i);
            match text.parse::<i128>() {
                Ok(n) if (-EXACT..=EXACT).contains(&n) => Value::from(n as i64),
                _ => Value::String(text),
            }
        }
        t if t.is_floating() => {
            let text = text(array, i);
            match text
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
            {
                Some(n) => Value::Number(n),
                // NaN and the infinities have no JSON number.
                None => Value::String(text),
            }
        }
        _ => Value::String(text(array, i)),
    }
}

fn bytes(n: usize) -> Value {
    serde_json::json!({ "bytes": n })
}

fn list(items: &dyn Array) -> Value {
    Value::Array((0..items.len()).map(|i| value(items, i)).collect())
}

/// Arrow's text form of one value.
fn text(array: &dyn Array, i: usize) -> String {
    match ArrayFormatter::try_new(array, &FormatOptions::default()) {
        Ok(f) => f.value(i).to_string(),
        Err(e) => format!("<{e}>"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
    use arrow_array::{BinaryArray, Int64Array, StringArray};
    use arrow_schema::{Field, Schema};

    use super::*;

    #[test]
    fn values_are_json_and_binary_is_its_size() {
        let mut vectors = FixedSizeListBuilder::new(Float32Builder::new(), 2);
        for v in [[0.5f32, 1.0], [2.0, -1.5]] {
            vectors.values().append_slice(&v);
            vectors.append(true);
        }
        let vectors = vectors.finish();
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("blob", DataType::Binary, true),
            Field::new("vector", vectors.data_type().clone(), true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, i64::MAX])),
                Arc::new(StringArray::from(vec![Some("<img src=x>"), None])),
                Arc::new(BinaryArray::from(vec![&b"abc"[..], &b""[..]])),
                Arc::new(vectors),
            ],
        )
        .unwrap();
        let answer = rows(&schema, &[batch]);
        assert_eq!(answer["columns"][3]["name"], "vector");
        assert_eq!(
            answer["rows"][0],
            serde_json::json!({"id": 1, "name": "<img src=x>", "blob": {"bytes": 3}, "vector": [0.5, 1.0]})
        );
        // Beyond JavaScript's exact integers: a string, so no digit is lost.
        assert_eq!(answer["rows"][1]["id"], i64::MAX.to_string());
        assert_eq!(answer["rows"][1]["name"], Value::Null);
        assert_eq!(answer["rows"][1]["vector"], serde_json::json!([2.0, -1.5]));
    }
}
