//! The audit log: one JSON line for every mutation, every refusal (a 401, a 403, or a
//! request answered "not found" because the caller may not see what it names) and every
//! credential vended. It never holds a secret or a token: a vended key shows only its first
//! characters. Its destination is its own (`--audit-log`: a file, `stdout` or `stderr`).

use std::io::Write;
use std::sync::Mutex;

use serde::Serialize;

/// One audited request.
#[derive(Serialize, Debug, Default)]
pub struct Event {
    /// RFC 3339, UTC, milliseconds.
    pub time: String,
    pub request_id: String,
    pub principal: String,
    /// How the principal authenticated (`api-key`, `jwt`, `certificate`, `anonymous`,
    /// `open`), or `none` when it did not.
    pub scheme: String,
    /// `<object>.<operation>`, as in the route: `table.declare`, `namespace.drop`.
    pub operation: String,
    pub id: Vec<String>,
    /// `allow` or `deny`.
    pub decision: &'static str,
    pub status: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The access the vended credentials carry (`read`, `write`, or the policy's name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_vended: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_id_prefix: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
}

pub struct Audit {
    out: Option<Mutex<Box<dyn Write + Send>>>,
}

impl Audit {
    pub fn off() -> Self {
        Audit { out: None }
    }

    /// Opens a destination: `stdout`, `stderr`, or a file (appended to).
    pub fn open(destination: &str) -> Result<Self, String> {
        let out: Box<dyn Write + Send> = match destination {
            "stdout" | "-" => Box::new(std::io::stdout()),
            "stderr" => Box::new(std::io::stderr()),
            path => Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| format!("cannot open {path}: {e}"))?,
            ),
        };
        Ok(Audit {
            out: Some(Mutex::new(out)),
        })
    }

    pub fn enabled(&self) -> bool {
        self.out.is_some()
    }

    pub fn record(&self, mut event: Event) {
        let Some(out) = &self.out else { return };
        event.time = rfc3339_now();
        let Ok(mut line) = serde_json::to_vec(&event) else {
            return;
        };
        line.push(b'\n');
        let mut out = out.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = out.write_all(&line).and_then(|()| out.flush()) {
            tracing::error!(error = %e, "could not write the audit log");
        }
    }
}

/// Now as `2026-11-30T21:04:05.123Z`.
fn rfc3339_now() -> String {
    rfc3339(crate::catalog::records::now_ms())
}

/// A time in unix milliseconds as `2026-11-30T21:04:05.123Z`.
pub fn rfc3339(ms: u64) -> String {
    let (secs, millis) = (ms / 1000, ms % 1000);
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The calendar date `days` after 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_787), (2026, 11, 30));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn one_json_line_per_event() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let audit = Audit::open(path.to_str().unwrap()).unwrap();
        audit.record(Event {
            request_id: "r1".into(),
            principal: "alice".into(),
            operation: "table.declare".into(),
            decision: "allow",
            status: 200,
            ..Default::default()
        });
        audit.record(Event {
            decision: "deny",
            status: 403,
            ..Default::default()
        });
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["principal"], "alice");
        assert!(lines[0]["time"].as_str().unwrap().ends_with('Z'));
        assert_eq!(lines[1]["decision"], "deny");
    }
}
