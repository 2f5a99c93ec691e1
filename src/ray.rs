//! Heavy table work on a Ray cluster (`--ray-address`): the gateway stays in charge and the
//! cluster does the work.
//!
//! - **The gateway decides.** It finds a table due, takes the table's maintenance lease and
//!   writes the job's transaction record, as for work it runs itself (`maintain`, `jobs`);
//!   the maintenance policy's `maintenance.ray.*` thresholds say which jobs leave it.
//! - **The job is submitted through Ray's Jobs API** (the dashboard's HTTP address): the
//!   entrypoint is the Python package in `jobs/lance_gateway_ray`, built into this binary
//!   and uploaded as the job's working directory (nothing is downloaded on the cluster; its
//!   Python brings pylance and Ray). Its submission id is `lance-gateway-<transaction id>`,
//!   so the transaction record names the job.
//! - **The job reaches the table through the gateway**: it opens it with the Lance
//!   Namespace REST client, so it gets the storage options any client gets for that table
//!   (scoped credentials where configured) and, under managed versioning, commits with
//!   CreateTableVersion like any writer. Before committing it reads its transaction: a job
//!   the gateway canceled (AlterTransaction) or gave up (its lease lost) commits nothing.
//! - **The gateway follows the job** to its end, reads the result line the job prints from
//!   its log, and stops the job when its own task is stopped.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Map, Value, json};

use crate::config::Secret;
use crate::error::{Code, Error, Result};

/// The job package's files, as the binary carries them.
const PACKAGE: &[(&str, &str)] = &[
    (
        "lance_gateway_ray/__init__.py",
        include_str!("../jobs/lance_gateway_ray/__init__.py"),
    ),
    (
        "lance_gateway_ray/__main__.py",
        include_str!("../jobs/lance_gateway_ray/__main__.py"),
    ),
    (
        "lance_gateway_ray/gateway.py",
        include_str!("../jobs/lance_gateway_ray/gateway.py"),
    ),
    (
        "lance_gateway_ray/compact.py",
        include_str!("../jobs/lance_gateway_ray/compact.py"),
    ),
    (
        "lance_gateway_ray/index.py",
        include_str!("../jobs/lance_gateway_ray/index.py"),
    ),
    (
        "lance_gateway_ray/cleanup.py",
        include_str!("../jobs/lance_gateway_ray/cleanup.py"),
    ),
];

/// The line a job prints its result on.
const RESULT: &str = "LANCE_GATEWAY_RESULT ";

/// The exit status with which a job says it did not commit because the gateway no longer
/// wanted it to.
const STOPPED_BY_GATEWAY: &str = "exit code 3";

/// Where the gateway finds the cluster, and how a job finds the gateway.
#[derive(Clone, Debug)]
pub struct RaySettings {
    /// Ray's Jobs API, `http://head:8265`.
    pub address: String,
    /// This gateway's REST address as the cluster's workers reach it.
    pub gateway_uri: String,
    /// The API key a job presents to the gateway, where callers must authenticate.
    pub api_key: Option<Secret>,
    /// The cluster's token, where it authenticates callers (sent as a bearer token).
    pub token: Option<Secret>,
    /// How often a running job's status is read.
    pub poll: Duration,
}

/// A Ray cluster the gateway submits jobs to.
pub struct Ray {
    settings: RaySettings,
    http: reqwest::Client,
}

impl std::fmt::Debug for Ray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ray")
            .field("address", &self.settings.address)
            .finish()
    }
}

/// One task of the job package: its name (`python -m lance_gateway_ray <task>`), the table,
/// the transaction the job works under, and the task's options.
pub struct JobSpec<'a> {
    pub task: &'a str,
    pub table: &'a [String],
    pub transaction: &'a str,
    pub options: Value,
}

/// The package as a zip file, and its name in Ray's store (named by its content, so a
/// cluster keeps one copy per build and a new build never runs an old one).
fn package() -> &'static (String, Vec<u8>) {
    static ZIPPED: OnceLock<(String, Vec<u8>)> = OnceLock::new();
    ZIPPED.get_or_init(|| {
        use sha2::Digest;
        use std::io::Write;
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        // Stored, with a fixed time: the same files always make the same bytes.
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .last_modified_time(zip::DateTime::default());
        for (name, text) in PACKAGE {
            // Writing to memory fails only on a name zip cannot hold; these are fixed.
            zip.start_file(*name, options)
                .and_then(|()| zip.write_all(text.as_bytes()).map_err(Into::into))
                .expect("the job package's files go into a zip in memory");
        }
        let bytes = zip
            .finish()
            .expect("the job package's zip is finished in memory")
            .into_inner();
        let digest = sha2::Sha256::digest(&bytes);
        let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        (format!("_ray_pkg_lance_gateway_{hex}.zip"), bytes)
    })
}

fn segment(text: &str) -> String {
    utf8_percent_encode(text, NON_ALPHANUMERIC).to_string()
}

/// The submission id of the job of transaction `transaction`.
pub fn job_id(transaction: &str) -> String {
    format!("lance-gateway-{transaction}")
}

/// The figures a job's run reports (`jobs::Figures`), from what job `job` printed as its
/// result: where it ran, and what it did under the names in-gateway runs use.
pub fn figures(job: &str, result: &Map<String, Value>) -> crate::jobs::Figures {
    let mut figures = crate::jobs::Figures::new();
    figures.insert("executor".into(), "ray".into());
    figures.insert("ray_job".into(), job.to_string());
    for (name, key) in [
        ("ray_tasks", "tasks"),
        ("version_after", "version"),
        ("fragments_removed", "fragments_removed"),
        ("fragments_added", "fragments_added"),
        ("segments", "segments"),
        ("versions_removed", "versions_removed"),
        ("bytes_reclaimed", "bytes_reclaimed"),
        ("files_removed", "files_removed"),
    ] {
        match result.get(key) {
            Some(Value::String(v)) => figures.insert(name.into(), v.clone()),
            Some(v) => figures.insert(name.into(), v.to_string()),
            None => None,
        };
    }
    figures
}

/// Whether a job that ran on Ray and whose gateway stopped (transaction `tx`) committed,
/// as Ray's record of it says (`Ray::settle`); `None` when it did not run on Ray.
pub async fn settled(
    ray: Option<&Arc<Ray>>,
    tx: &crate::catalog::transactions::TransactionRecord,
) -> Option<Result<bool>> {
    if tx.results.get("executor").map(String::as_str) != Some("ray") {
        return None;
    }
    Some(match ray {
        Some(ray) => ray.settle(&job_id(&tx.id)).await,
        None => Err(Error::unavailable(format!(
            "transaction {} ran on a Ray cluster and this gateway has none configured (--ray-address) to ask whether it committed",
            tx.id
        ))),
    })
}

/// How a job ended.
#[derive(Debug)]
enum End {
    Succeeded,
    /// Failed, stopped or exited on its own: Ray's status and message.
    Not(String, String),
}

impl Ray {
    pub fn new(settings: RaySettings) -> Result<Arc<Ray>> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| Error::internal("could not make the Ray client", e))?;
        Ok(Arc::new(Ray { settings, http }))
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.settings.address.trim_end_matches('/'))
    }

    fn unreachable(&self, e: impl std::fmt::Display) -> Error {
        Error::unavailable(format!(
            "the Ray cluster at {} did not answer: {e}",
            self.settings.address
        ))
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<(u16, String)> {
        let request = match &self.settings.token {
            Some(token) => request.bearer_auth(token.expose()),
            None => request,
        };
        let answer = request.send().await.map_err(|e| self.unreachable(e))?;
        let status = answer.status().as_u16();
        let body = answer.text().await.map_err(|e| self.unreachable(e))?;
        Ok((status, body))
    }

    fn refused(&self, what: &str, status: u16, body: &str) -> Error {
        let said: String = body
            .lines()
            .last()
            .unwrap_or_default()
            .chars()
            .take(500)
            .collect();
        let hint = match (status, &self.settings.token) {
            (401 | 403, None) => " (a cluster with token authentication needs --ray-token)",
            (401 | 403, Some(_)) => " (is --ray-token the cluster's token?)",
            _ => "",
        };
        Error::unavailable(format!(
            "the Ray cluster at {} refused to {what} ({status}): {said}{hint}",
            self.settings.address
        ))
    }

    /// Makes sure the cluster holds the job package (and pins it for the next submission).
    async fn upload(&self) -> Result<String> {
        let (name, bytes) = package();
        let path = format!("/api/packages/gcs/{name}");
        let (status, body) = self.send(self.http.get(self.url(&path))).await?;
        match status {
            200 => {}
            404 => {
                let (status, body) = self
                    .send(self.http.put(self.url(&path)).body(bytes.clone()))
                    .await?;
                if status != 200 {
                    return Err(self.refused("take the job package", status, &body));
                }
            }
            _ => return Err(self.refused("look up the job package", status, &body)),
        }
        Ok(format!("gcs://{name}"))
    }

    /// Submits `spec`'s job; answers its submission id.
    pub async fn submit(&self, spec: &JobSpec<'_>) -> Result<String> {
        let working_dir = self.upload().await?;
        let id = job_id(spec.transaction);
        let table = serde_json::to_string(spec.table)
            .map_err(|e| Error::internal("could not write a table id", e))?;
        let mut env = Map::new();
        env.insert(
            "LANCE_GATEWAY_URI".into(),
            self.settings.gateway_uri.clone().into(),
        );
        env.insert("LANCE_GATEWAY_TABLE".into(), table.into());
        env.insert("LANCE_GATEWAY_TRANSACTION".into(), spec.transaction.into());
        env.insert(
            "LANCE_GATEWAY_OPTIONS".into(),
            spec.options.to_string().into(),
        );
        // The gateway's fault injection for tests (a pause before a maintenance commit, a
        // pause in each rewrite) applies to the job too.
        for (name, value) in std::env::vars() {
            if name.starts_with("LANCE_GATEWAY_FAULT_") {
                env.insert(name, value.into());
            }
        }
        if let Some(key) = &self.settings.api_key {
            env.insert("LANCE_GATEWAY_API_KEY".into(), key.expose().into());
        }
        let body = json!({
            "entrypoint": format!("python -m lance_gateway_ray {}", spec.task),
            "submission_id": id,
            "runtime_env": {"working_dir": working_dir, "env_vars": env},
            "metadata": {
                "lance_gateway.table": spec.table.join("$"),
                "lance_gateway.transaction_id": spec.transaction,
                "lance_gateway.task": spec.task,
            },
        });
        let (status, answer) = self
            .send(
                self.http
                    .post(self.url("/api/jobs/"))
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.to_string()),
            )
            .await?;
        if status != 200 {
            return Err(self.refused("start a job", status, &answer));
        }
        Ok(id)
    }

    /// A job's record at `/api/jobs/<id><rest>`, read as JSON (`what` names it in errors).
    async fn job_json(&self, id: &str, rest: &str, what: &str) -> Result<Value> {
        let path = format!("/api/jobs/{}{rest}", segment(id));
        let (status, body) = self.send(self.http.get(self.url(&path))).await?;
        if status != 200 {
            return Err(self.refused(&format!("give {what}"), status, &body));
        }
        serde_json::from_str(&body)
            .map_err(|e| Error::internal(format!("Ray answered {what} in a form not known"), e))
    }

    /// Ray's status of job `id` and its message.
    async fn status(&self, id: &str) -> Result<(String, String)> {
        let info = self.job_json(id, "", "a job's status").await?;
        Ok((text(&info, "status"), text(&info, "message")))
    }

    /// The job's log (its driver's output).
    async fn logs(&self, id: &str) -> Result<String> {
        let logs = self.job_json(id, "/logs", "a job's log").await?;
        Ok(text(&logs, "logs"))
    }

    /// Asks Ray to stop job `id`.
    pub async fn stop(&self, id: &str) -> Result<()> {
        let (status, body) = self
            .send(
                self.http
                    .post(self.url(&format!("/api/jobs/{}/stop", segment(id)))),
            )
            .await?;
        if status != 200 {
            return Err(self.refused("stop a job", status, &body));
        }
        Ok(())
    }

    /// Whether job `id`, whose gateway stopped following it, committed: it did if it
    /// succeeded. One still running is stopped first (it would find its transaction no
    /// longer running at its commit anyway), so the answer stays true.
    pub async fn settle(&self, id: &str) -> Result<bool> {
        let (status, _) = self.status(id).await?;
        match status.as_str() {
            "SUCCEEDED" => Ok(true),
            "FAILED" | "STOPPED" => Ok(false),
            _ => {
                self.stop(id).await?;
                match self.wait(id).await? {
                    End::Succeeded => Ok(true),
                    End::Not(..) => Ok(false),
                }
            }
        }
    }

    async fn wait(&self, id: &str) -> Result<End> {
        let mut beat = tokio::time::interval(self.settings.poll);
        loop {
            beat.tick().await;
            let (status, message) = self.status(id).await?;
            match status.as_str() {
                "SUCCEEDED" => return Ok(End::Succeeded),
                "FAILED" | "STOPPED" => return Ok(End::Not(status, message)),
                _ => {}
            }
        }
    }

    /// Runs `spec`'s job to its end and answers what it printed as its result. Dropped
    /// before the end (the gateway's task stopped), it stops the job.
    pub async fn run(self: &Arc<Self>, spec: JobSpec<'_>) -> Result<Map<String, Value>> {
        let id = self.submit(&spec).await?;
        self.follow(&id).await
    }

    /// Runs `spec`'s job to its end: the figures it reports (`figures`).
    pub async fn work(self: &Arc<Self>, spec: JobSpec<'_>) -> Result<crate::jobs::Figures> {
        let job = job_id(spec.transaction);
        Ok(figures(&job, &self.run(spec).await?))
    }

    /// Follows job `id` (submitted here, or by a gateway that stopped) to its end and
    /// answers its result; dropped before the end, stops it.
    pub async fn follow(self: &Arc<Self>, id: &str) -> Result<Map<String, Value>> {
        let id = id.to_string();
        let guard = StopOnDrop {
            ray: self.clone(),
            id: Some(id.clone()),
        };
        let end = self.wait(&id).await;
        guard.disarm();
        let logs = self.logs(&id).await.unwrap_or_default();
        match end? {
            End::Succeeded => result_of(&logs).ok_or_else(|| {
                Error::internal(
                    format!("Ray job {id} ended without its result line"),
                    tail(&logs),
                )
            }),
            End::Not(status, message) if message.contains(STOPPED_BY_GATEWAY) => Err(Error::new(
                Code::ConcurrentModification,
                format!(
                    "Ray job {id} did not commit: its transaction was no longer running ({status})"
                ),
            )),
            End::Not(status, message) => Err(Error::new(
                Code::Internal,
                format!(
                    "Ray job {id} {}: {message}; its log ends: {}",
                    status.to_lowercase(),
                    tail(&logs)
                ),
            )),
        }
    }
}

/// The text under `key` in a JSON object (empty when absent).
fn text(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The result line of a job's log, read as JSON.
fn result_of(logs: &str) -> Option<Map<String, Value>> {
    logs.lines()
        .rev()
        .find_map(|line| line.strip_prefix(RESULT))
        .and_then(|json| serde_json::from_str(json).ok())
}

/// The last lines of a log, for an error message.
fn tail(logs: &str) -> String {
    let lines: Vec<&str> = logs.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

/// Stops a job whose follower is dropped before the job ended.
struct StopOnDrop {
    ray: Arc<Ray>,
    id: Option<String>,
}

impl StopOnDrop {
    fn disarm(mut self) {
        self.id = None;
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let ray = self.ray.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    match ray.stop(&id).await {
                        Ok(()) => tracing::info!(job = %id, "stopped a Ray job"),
                        Err(e) => tracing::warn!(job = %id, error = %e, "could not stop a Ray job"),
                    }
                });
            }
            Err(_) => tracing::warn!(job = %id, "could not stop a Ray job: no runtime"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_package_holds_every_file_and_is_named_by_its_content() {
        let (name, bytes) = package();
        assert!(
            name.starts_with("_ray_pkg_") && name.ends_with(".zip"),
            "{name}"
        );
        let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes.clone()))
            .expect("the package reads back as a zip file");
        let names: Vec<String> = zip.file_names().map(str::to_string).collect();
        let want: Vec<&str> = PACKAGE.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, want);
        // And the binary carries every module of the package's folder.
        let folder =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("jobs/lance_gateway_ray");
        let mut modules: Vec<String> = std::fs::read_dir(&folder)
            .unwrap_or_else(|e| panic!("{} lists: {e}", folder.display()))
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter(|name| name.ends_with(".py"))
            .map(|name| format!("lance_gateway_ray/{name}"))
            .collect();
        modules.sort();
        let mut carried: Vec<String> = want.iter().map(|n| n.to_string()).collect();
        carried.sort();
        assert_eq!(
            carried,
            modules,
            "PACKAGE must list every module in {}",
            folder.display()
        );
        // Every file as the binary carries it, byte for byte.
        for (file, text) in PACKAGE {
            let mut entry = zip
                .by_name(file)
                .unwrap_or_else(|e| panic!("{file} is in the package: {e}"));
            let mut read = String::new();
            std::io::Read::read_to_string(&mut entry, &mut read)
                .unwrap_or_else(|e| panic!("{file} reads back from the package: {e}"));
            assert_eq!(read, *text, "{file}");
        }
        // The same files make the same package: one copy per build on a cluster.
        assert_eq!(package().1, *bytes);
    }

    #[test]
    fn the_result_is_the_last_result_line() {
        let logs = "starting\nLANCE_GATEWAY_RESULT {\"a\": 1}\nnoise\nLANCE_GATEWAY_RESULT {\"fragments_removed\": 300}\n(raylet) bye\n";
        let result = result_of(logs).expect("a log with result lines has a result");
        assert_eq!(result["fragments_removed"], 300);
        assert!(
            !result.contains_key("a"),
            "an earlier result line is not the result"
        );
        assert!(result_of("no result here\n").is_none());
        // A last result line that is not JSON is no result (an earlier one is not taken
        // instead: it may describe an attempt that did not end the job).
        assert!(
            result_of("LANCE_GATEWAY_RESULT {\"a\": 1}\nLANCE_GATEWAY_RESULT {cut\n").is_none()
        );
    }
}
