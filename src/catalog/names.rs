//! Identifiers: parsing the `{id}` path segment, validating names, and the two encodings a
//! name gets on storage (a catalog key segment and a data path segment).

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

use crate::error::{Error, Result};

/// The default delimiter of the Lance Namespace protocol.
pub const DEFAULT_DELIMITER: &str = "$";

/// Longest name part we accept, in bytes.
pub const MAX_PART_LEN: usize = 255;

/// Longest a name may be once encoded into a key segment: file systems allow 255 bytes per
/// name, and the longest suffix a catalog key adds is `.table.json`.
pub const MAX_SEGMENT_LEN: usize = 240;

/// Longest an id may be once encoded (all its segments): S3 keys are at most 1024 bytes,
/// and a warehouse prefix and the catalog's folders come on top.
pub const MAX_ID_LEN: usize = 768;

/// An object id: the names from just below the root down to the object. Empty = the root.
pub type Id = Vec<String>;

/// Parses a raw (still percent-encoded) `{id}` path segment. A `+` is a space: the Lance
/// Rust client form-encodes ids, and every client encodes a literal `+` as `%2B`.
pub fn parse_path_id(raw: &str, delimiter: &str) -> Result<Id> {
    let spaced = raw.replace('+', " ");
    let decoded = percent_decode_str(&spaced)
        .decode_utf8()
        .map_err(|_| Error::invalid("the id in the path is not valid UTF-8"))?;
    split_id(&decoded, delimiter)
}

/// One path segment decoded as the Lance client encodes ids and index names: a `+` is a
/// space, then percent-escapes.
pub fn decode_path_segment(raw: &str) -> Result<String> {
    let spaced = raw.replace('+', " ");
    decode_percent(&spaced)
}

/// Percent-escapes alone decoded (a `+` stays a `+`).
pub fn decode_percent(raw: &str) -> Result<String> {
    percent_decode_str(raw)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| Error::invalid("the path is not valid UTF-8"))
}

/// Splits a decoded id string on the delimiter. The bare delimiter (or nothing) is the root.
pub fn split_id(decoded: &str, delimiter: &str) -> Result<Id> {
    if delimiter.is_empty() {
        return Err(Error::invalid("the delimiter must not be empty"));
    }
    if decoded.is_empty() || decoded == delimiter {
        return Ok(Vec::new());
    }
    let parts: Id = decoded.split(delimiter).map(str::to_string).collect();
    validate_id(&parts, delimiter)?;
    Ok(parts)
}

/// Checks every part of an id: not empty, not too long as stored, no control characters.
pub fn validate_id(parts: &[String], delimiter: &str) -> Result<()> {
    let mut stored = 0;
    for part in parts {
        validate_name(part).map_err(|e| {
            e.with_detail(format!(
                "in id '{}'",
                parts.join(delimiter).chars().take(300).collect::<String>()
            ))
        })?;
        stored += key_segment(part).len() + 1;
    }
    if stored > MAX_ID_LEN {
        return Err(Error::invalid(format!(
            "the id is {stored} bytes once encoded for storage; at most {MAX_ID_LEN} are allowed"
        )));
    }
    Ok(())
}

pub fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid("an id has an empty name part"));
    }
    if name.len() > MAX_PART_LEN {
        return Err(Error::invalid(format!(
            "name part longer than {MAX_PART_LEN} bytes"
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(Error::invalid("a name part contains a control character"));
    }
    // Checked on the name as it is stored (percent-encoded), not as it was sent.
    let stored = key_segment(name).len();
    if stored > MAX_SEGMENT_LEN {
        return Err(Error::invalid(format!(
            "a name part is {stored} bytes once encoded for storage; at most {MAX_SEGMENT_LEN} are allowed"
        )));
    }
    Ok(())
}

pub fn join(id: &[String], delimiter: &str) -> String {
    if id.is_empty() {
        delimiter.to_string()
    } else {
        id.join(delimiter)
    }
}

/// Characters kept as they are in a catalog key segment: ASCII letters, digits, `-` and `_`.
/// Everything else (including `.` and `/`) is percent-encoded, so a segment can never be
/// `.`, `..`, contain a `/`, or collide with the `.json` suffix.
const KEY_SET: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_');

pub fn key_segment(name: &str) -> String {
    utf8_percent_encode(name, KEY_SET).to_string()
}

pub fn key_segment_decode(segment: &str) -> Option<String> {
    percent_decode_str(segment)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
}

/// The folder name a namespace or table gets in a server-chosen location: the name itself
/// when it is plain (`[A-Za-z0-9_-]`, not starting with `_`), otherwise a readable slug plus
/// a short hash of the name, so odd names stay unique without `%` in any URL.
pub fn path_segment(name: &str) -> String {
    let plain = name.len() <= 200
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !name.starts_with('_');
    if plain {
        return name.to_string();
    }
    let slug: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(48)
        .collect();
    format!(
        "{}-{:08x}",
        slug.trim_start_matches('_'),
        fnv1a(name.as_bytes()) as u32
    )
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_the_bare_delimiter() {
        assert!(parse_path_id("%24", "$").unwrap().is_empty());
        assert!(parse_path_id("$", "$").unwrap().is_empty());
        assert!(parse_path_id("::", "::").unwrap().is_empty());
    }

    #[test]
    fn plus_is_a_space_and_percent_is_decoded() {
        assert_eq!(
            parse_path_id("sp+ace%24t%2B1", "$").unwrap(),
            vec!["sp ace", "t+1"]
        );
        assert_eq!(parse_path_id("a%2Fb%24c", "$").unwrap(), vec!["a/b", "c"]);
        assert_eq!(parse_path_id("%C3%A9t%C3%A9", "$").unwrap(), vec!["été"]);
    }

    #[test]
    fn custom_delimiters_split() {
        assert_eq!(parse_path_id("a.b.c", ".").unwrap(), vec!["a", "b", "c"]);
        assert_eq!(parse_path_id("a__d__b", "__d__").unwrap(), vec!["a", "b"]);
        assert_eq!(parse_path_id("a$b", ".").unwrap(), vec!["a$b"]);
    }

    #[test]
    fn empty_parts_are_refused() {
        for raw in ["a%24%24b", "%24a", "a%24"] {
            let err = parse_path_id(raw, "$").unwrap_err();
            assert_eq!(err.code, crate::error::Code::InvalidInput, "{raw}");
        }
    }

    #[test]
    fn key_segments_round_trip_and_stay_safe() {
        for name in [
            "plain", "with.dot", "..", ".", "a/b", "sp ace", "été", "x.json", "%41",
        ] {
            let seg = key_segment(name);
            assert!(!seg.contains('/') && !seg.contains('.'), "{seg}");
            assert_eq!(key_segment_decode(&seg).unwrap(), name);
        }
    }

    #[test]
    fn names_are_limited_as_stored() {
        assert!(validate_name(&"a".repeat(240)).is_ok());
        assert!(validate_name(&"a".repeat(241)).is_err(), "249 ASCII bytes");
        assert!(validate_name(&"é".repeat(40)).is_ok(), "240 bytes encoded");
        assert!(
            validate_name(&"é".repeat(42)).is_err(),
            "42 × é is 252 bytes encoded"
        );
        let deep: Vec<String> = (0..10).map(|_| "x".repeat(100)).collect();
        assert!(validate_id(&deep, "$").is_err());
        assert!(path_segment(&"a".repeat(240)).len() < 100);
    }

    #[test]
    fn path_segments_are_plain_and_distinct() {
        assert_eq!(path_segment("embeddings"), "embeddings");
        let odd = path_segment("x.lance");
        assert!(odd.starts_with("x_lance-"), "{odd}");
        assert_ne!(path_segment("a b"), path_segment("a_b"));
        assert_ne!(path_segment(".."), "..");
        assert!(!path_segment("_lance").starts_with('_'));
    }
}
