//! Bytes that guard something (API key salts and hashes, the peers' signing key, digests
//! named in keys), made and written as text the same way everywhere.

/// `n` random bytes (from the OS, through UUID v4's generator: 122 random bits each).
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n + 16);
    while out.len() < n {
        out.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    }
    out.truncate(n);
    out
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of `hex`'s text; `None` for anything else.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_what_it_did_not_write() {
        let bytes = random_bytes(37);
        assert_eq!(bytes.len(), 37);
        assert_eq!(unhex(&hex(&bytes)), Some(bytes));
        assert_eq!(hex(&[0, 15, 255]), "000fff");
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("é0"), None);
    }
}
