//! One error type for the whole gateway. Each variant is one of the Lance Namespace spec's
//! error codes (spec.md §4.2); `api::error` turns it into the spec's JSON body and status.
//! Everything below the HTTP layer speaks this type, so a rule in `catalog/` never has to
//! know which status a client will see.

use std::fmt;

/// The spec's numeric error codes (lance-namespace 0.13.0, `ErrorCode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    Unsupported = 0,
    NamespaceNotFound = 1,
    NamespaceAlreadyExists = 2,
    NamespaceNotEmpty = 3,
    TableNotFound = 4,
    TableAlreadyExists = 5,
    TableIndexNotFound = 6,
    TableIndexAlreadyExists = 7,
    TableTagNotFound = 8,
    TableTagAlreadyExists = 9,
    TransactionNotFound = 10,
    TableVersionNotFound = 11,
    TableColumnNotFound = 12,
    InvalidInput = 13,
    ConcurrentModification = 14,
    PermissionDenied = 15,
    Unauthenticated = 16,
    ServiceUnavailable = 17,
    Internal = 18,
    InvalidTableState = 19,
    TableSchemaValidationError = 20,
    TableBranchNotFound = 22,
    TableBranchAlreadyExists = 23,
}

impl Code {
    /// The code with spec number `n`, if there is one.
    pub fn from_number(n: i32) -> Option<Code> {
        use Code::*;
        [
            Unsupported,
            NamespaceNotFound,
            NamespaceAlreadyExists,
            NamespaceNotEmpty,
            TableNotFound,
            TableAlreadyExists,
            TableIndexNotFound,
            TableIndexAlreadyExists,
            TableTagNotFound,
            TableTagAlreadyExists,
            TransactionNotFound,
            TableVersionNotFound,
            TableColumnNotFound,
            InvalidInput,
            ConcurrentModification,
            PermissionDenied,
            Unauthenticated,
            ServiceUnavailable,
            Internal,
            InvalidTableState,
            TableSchemaValidationError,
            TableBranchNotFound,
            TableBranchAlreadyExists,
        ]
        .into_iter()
        .find(|c| *c as i32 == n)
    }

    /// The HTTP status the spec pairs with this code.
    pub fn http_status(self) -> u16 {
        match self {
            Code::Unsupported => 406,
            Code::NamespaceNotFound
            | Code::TableNotFound
            | Code::TableIndexNotFound
            | Code::TableTagNotFound
            | Code::TransactionNotFound
            | Code::TableVersionNotFound
            | Code::TableColumnNotFound
            | Code::TableBranchNotFound => 404,
            Code::NamespaceAlreadyExists
            | Code::NamespaceNotEmpty
            | Code::TableAlreadyExists
            | Code::TableIndexAlreadyExists
            | Code::TableTagAlreadyExists
            | Code::ConcurrentModification
            | Code::InvalidTableState
            | Code::TableBranchAlreadyExists => 409,
            Code::InvalidInput | Code::TableSchemaValidationError => 400,
            Code::PermissionDenied => 403,
            Code::Unauthenticated => 401,
            Code::ServiceUnavailable => 503,
            Code::Internal => 500,
        }
    }
}

/// A failure with the spec's code, a message safe to show the client, and an optional detail.
#[derive(Debug, thiserror::Error)]
pub struct Error {
    pub code: Code,
    pub message: String,
    pub detail: Option<String>,
    /// The commit this failure concerns, when the client should follow it (a batch whose
    /// outcome is unknown): answered beside the error as `transaction_id`.
    pub transaction_id: Option<String>,
    /// The gateway cannot know whether the commit's deciding write landed: answered as HTTP
    /// 504 with code 18, never as the generic 503 (README, *Commit outcomes*).
    pub outcome_unknown: bool,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)?;
        if let Some(detail) = &self.detail {
            write!(f, " ({detail})")?;
        }
        Ok(())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Error {
            code,
            message: message.into(),
            detail: None,
            transaction_id: None,
            outcome_unknown: false,
        }
    }

    /// A commit whose deciding write was sent but whose outcome could not be learned (the
    /// store timed out, reset the connection or failed after the request was sent, and kept
    /// failing while the gateway looked): it may have committed or not. `transaction_id` is
    /// the batch to follow with DescribeTransaction (none for a single-table commit, which
    /// is retried as it was sent).
    pub fn commit_state_unknown(transaction_id: Option<String>, cause: impl fmt::Display) -> Self {
        tracing::error!(transaction = ?transaction_id, %cause, "a commit's outcome is unknown");
        let message = match &transaction_id {
            Some(id) => format!(
                "commit state unknown: the store did not say whether batch commit {id}                  committed; DescribeTransaction tells once it is settled, and a retry with the                  same Idempotency-Key answers its outcome"
            ),
            None => "commit state unknown: the store did not say whether the version was                      committed; send the same request again (it commits once)"
                .to_string(),
        };
        Error {
            transaction_id,
            outcome_unknown: true,
            ..Self::new(Code::Internal, message)
        }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(Code::Unsupported, message)
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidInput, message)
    }
    pub fn namespace_not_found(id: &str) -> Self {
        Self::new(
            Code::NamespaceNotFound,
            format!("namespace '{id}' not found"),
        )
    }
    pub fn namespace_exists(id: &str) -> Self {
        Self::new(
            Code::NamespaceAlreadyExists,
            format!("namespace '{id}' already exists"),
        )
    }
    pub fn namespace_not_empty(id: &str, what: &str) -> Self {
        Self::new(
            Code::NamespaceNotEmpty,
            format!("namespace '{id}' is not empty: {what}"),
        )
    }
    pub fn table_not_found(id: &str) -> Self {
        Self::new(Code::TableNotFound, format!("table '{id}' not found"))
    }
    pub fn table_exists(id: &str) -> Self {
        Self::new(
            Code::TableAlreadyExists,
            format!("table '{id}' already exists"),
        )
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(Code::ConcurrentModification, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(Code::ServiceUnavailable, message)
    }
    /// A catalog record at `key` written in a format newer than this build reads: a newer
    /// release is serving the warehouse beside this one. Nothing is done with the record
    /// (it is never rolled back, deleted or rewritten); the request is answered 503 naming
    /// both formats, so a client retries (a balancer may send it to a newer gateway). Logged
    /// once per key and counted (`lance_gateway_newer_records_total`).
    pub fn newer_format(key: &str, format: u32) -> Self {
        use crate::catalog::records::READS_UP_TO;
        static LOGGED: std::sync::LazyLock<std::sync::Mutex<std::collections::HashSet<String>>> =
            std::sync::LazyLock::new(Default::default);
        crate::telemetry::newer_record();
        let first = LOGGED
            .lock()
            .map(|mut seen| seen.len() < 10_000 && seen.insert(key.to_string()))
            .unwrap_or(false);
        if first {
            tracing::warn!(
                key,
                format,
                reads_up_to = READS_UP_TO,
                release = env!("CARGO_PKG_VERSION"),
                "a catalog record is in a newer format than this gateway reads; it is left for a newer gateway"
            );
        }
        Self::new(
            Code::ServiceUnavailable,
            format!(
                "a catalog record this request needs is in format {format}, and this gateway \
                 (lance-gateway {}) reads formats up to {READS_UP_TO}: a newer release wrote \
                 it; retry on a newer gateway, or upgrade this one",
                env!("CARGO_PKG_VERSION")
            ),
        )
        .with_detail(key.to_string())
    }
    pub fn permission_denied(message: impl Into<String>) -> Self {
        Self::new(Code::PermissionDenied, message)
    }
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(Code::Unauthenticated, message)
    }
    /// An internal failure: the client sees only `message`; `cause` goes to the log.
    pub fn internal(message: impl Into<String>, cause: impl fmt::Display) -> Self {
        let message = message.into();
        tracing::error!(%cause, "{message}");
        Self::new(Code::Internal, message)
    }
}
