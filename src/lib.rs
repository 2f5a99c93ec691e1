//! lance-gateway: a Lance Namespace REST catalog over S3-compatible stores or a local
//! warehouse. `main.rs` is the command line; `server` wires configuration to the layers:
//! HTTP (`api`) -> rules (`catalog`) -> objects (`store`), with `vend` and `data` beside.
#![forbid(unsafe_code)]
// The data plane's handlers nest deep async state machines (axum over lance).
#![recursion_limit = "256"]

pub mod access;
pub mod admin;
pub mod api;
pub mod audit;
pub mod auth;
pub mod catalog;
pub mod coherence;
pub mod config;
pub mod data;
pub mod error;
pub mod jobs;
pub mod maintain;
pub mod ray;
pub mod secrets;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod tls;
pub mod vend;
