//! `lance-gateway admin`: a warehouse inspected and checked directly, with no server
//! running, through the same store and catalog code the server uses. Text for people,
//! `--json` for scripts; exit status 0 when all is well, 1 when `fsck` leaves problems,
//! 2 when the command could not run.

use std::sync::Arc;

use serde_json::json;

use crate::access::Ctx;
use crate::catalog::fsck::{Repair, Report};
use crate::catalog::layout::Layout;
use crate::catalog::maintenance::Task;
use crate::catalog::names::{DEFAULT_DELIMITER, join, split_id};
use crate::catalog::{Catalog, Settings};
use crate::config::{AdminCommand, AdminCommon, Config};
use crate::data::LanceDatasets;
use crate::maintain::{How, Maintainer};
use crate::server::build_parts;

/// Runs one admin command; returns the process's exit status.
pub async fn run(command: AdminCommand) -> i32 {
    let common: &AdminCommon = match &command {
        AdminCommand::Namespaces { common, .. }
        | AdminCommand::Tables { common, .. }
        | AdminCommand::Describe { common, .. }
        | AdminCommand::Maintain { common, .. }
        | AdminCommand::Fsck { common, .. }
        | AdminCommand::Upgrade { common, .. }
        | AdminCommand::Dropped { common, .. }
        | AdminCommand::Undrop { common, .. }
        | AdminCommand::Purge { common, .. }
        | AdminCommand::Backup { common, .. }
        | AdminCommand::Restore { common, .. }
        | AdminCommand::Verify { common, .. } => common,
    };
    let json_out = common.json;
    let writes = matches!(
        command,
        AdminCommand::Fsck { repair: true, .. }
            | AdminCommand::Maintain { dry_run: false, .. }
            | AdminCommand::Upgrade { to: Some(_), .. }
            | AdminCommand::Undrop { .. }
            | AdminCommand::Purge { .. }
            | AdminCommand::Restore { .. }
    );
    let restoring = matches!(command, AdminCommand::Restore { .. });
    let (catalog, datasets) = match open(common, writes, restoring).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("lance-gateway admin: {e}");
            return 2;
        }
    };
    let maintainer = Maintainer::new(
        catalog.clone(),
        datasets,
        Arc::new(crate::audit::Audit::off()),
        crate::maintain::Settings {
            enabled: false,
            ..Default::default()
        },
    );
    let result = match &command {
        AdminCommand::Namespaces { id, .. } => list(&catalog, id.as_deref(), false, json_out).await,
        AdminCommand::Tables { namespace, .. } => {
            list(&catalog, namespace.as_deref(), true, json_out).await
        }
        AdminCommand::Describe { id, .. } => describe(&catalog, id, json_out).await,
        AdminCommand::Upgrade { to, force, .. } => upgrade(&catalog, *to, *force, json_out).await,
        AdminCommand::Dropped { namespace, .. } => {
            dropped(&catalog, namespace.as_deref(), json_out).await
        }
        AdminCommand::Undrop {
            id,
            drop_id,
            new_id,
            ..
        } => {
            undrop(
                &catalog,
                id,
                drop_id.as_deref(),
                new_id.as_deref(),
                json_out,
            )
            .await
        }
        AdminCommand::Purge {
            id,
            drop_id,
            confirm,
            ..
        } => purge(&catalog, id, drop_id.as_deref(), confirm, json_out).await,
        AdminCommand::Backup { to, .. } => backup(&catalog, common, to, json_out).await,
        AdminCommand::Restore { from, force, .. } => {
            restore(&catalog, common, from, *force, json_out).await
        }
        AdminCommand::Verify { from, .. } => {
            return verify(&catalog, common, from.as_deref(), json_out).await;
        }
        AdminCommand::Maintain {
            id, dry_run, tasks, ..
        } => {
            let how = How {
                dry_run: *dry_run,
                tasks: tasks.iter().filter_map(|t| Task::parse(t)).collect(),
                now: true,
            };
            return maintain(&catalog, &maintainer, id.as_deref(), &how, json_out).await;
        }
        AdminCommand::Fsck {
            repair,
            delete_orphans,
            relocate,
            overdue_hours,
            ..
        } => {
            let how = Repair {
                repair: *repair,
                delete_orphans: *delete_orphans,
                relocate: *relocate,
            };
            return match catalog.fsck(how).await {
                Ok(mut report) => {
                    let overdue = std::time::Duration::from_secs(overdue_hours * 3600);
                    match maintainer.overdue(overdue).await {
                        Ok(notes) => report.findings.extend(notes),
                        Err(e) => eprintln!(
                            "lance-gateway admin fsck: could not look at the tables' maintenance: {e}"
                        ),
                    }
                    print_report(&report, json_out);
                    if report.left() == 0 { 0 } else { 1 }
                }
                Err(e) => {
                    eprintln!("lance-gateway admin fsck: could not check the warehouse: {e}");
                    2
                }
            };
        }
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("lance-gateway admin: {e}");
            2
        }
    }
}

/// Opens the catalog of an existing warehouse (never makes one, unless `restoring`: a
/// restore goes into an empty warehouse); a local one read-only unless the command `writes`. Unless `--node-id` names one, the admin runs under a node id
/// of its own: under a gateway's (the default `<host>:<port>` inside its container, say) it
/// would take that gateway's live operations for leftovers of an earlier run.
async fn open(
    common: &AdminCommon,
    writes: bool,
    restoring: bool,
) -> Result<(Arc<Catalog>, Arc<LanceDatasets>), String> {
    let mut args = common.serve.clone();
    if args.settings.node_id.is_none() {
        args.settings.node_id = Some(format!("lance-gateway-admin:{}", std::process::id()));
    }
    let config = Config::load(args).map_err(|e| e.to_string())?;
    // Opening a local store makes its folders: look before, so a wrong path stays untouched.
    if let crate::config::WarehouseUri::Local(path) = &config.warehouse
        && !restoring
    {
        if !path.is_dir() {
            return Err(format!("{}: no such folder", path.display()));
        }
        if !path.join(Layout::cell_record("")).is_file() {
            return Err(format!("{}: no lance-gateway catalog here", path.display()));
        }
    }
    let parts = build_parts(&config, writes).await?;
    if !parts.layout.endpoint_mode() && !restoring {
        let key = Layout::cell_record("");
        match parts.store.get(&key).await {
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err(format!(
                    "{}: no lance-gateway catalog here",
                    parts.layout.root_uri()
                ));
            }
            Err(e) => return Err(format!("{}: {e}", parts.layout.root_uri())),
        }
    }
    let datasets = Arc::new(LanceDatasets::new(parts.own_access));
    // What admin writes is pinned on the gateways that answer from memory.
    let store = crate::coherence::for_admin(parts.store, &parts.layout, &config);
    let catalog = Catalog::open(
        store,
        parts.layout,
        datasets.clone(),
        Settings::new(config.recovery_grace, config.node_id.clone())
            .with_maintenance(config.maintenance_policy.clone()),
    )
    .await
    .map_err(|e| format!("could not open the warehouse: {e}"))?;
    Ok((Arc::new(catalog), datasets))
}

/// `admin upgrade`: the warehouse's format and the gateway registry; with `to`, the raise.
async fn upgrade(
    cat: &Catalog,
    to: Option<u32>,
    force: bool,
    json_out: bool,
) -> Result<(), String> {
    use crate::catalog::records::{READS_UP_TO, WRITES_UP_TO};
    let raised = match to {
        Some(to) => Some(
            cat.upgrade_warehouse(to, force)
                .await
                .map_err(|e| e.message)?,
        ),
        None => None,
    };
    let formats = cat.warehouse_formats().await.map_err(|e| e.to_string())?;
    let gateways = cat.gateways().await.map_err(|e| e.to_string())?;
    if json_out {
        let formats: Vec<_> = formats
            .iter()
            .map(|(cell, f)| json!({"cell": cell, "warehouse_format": f}))
            .collect();
        println!(
            "{}",
            json!({
                "release": env!("CARGO_PKG_VERSION"),
                "reads_up_to": READS_UP_TO,
                "writes_up_to": WRITES_UP_TO,
                "cells": formats,
                "raised": raised,
                "gateways": gateways,
            })
        );
        return Ok(());
    }
    println!(
        "this release (lance-gateway {}) reads formats up to {READS_UP_TO} and writes up to {WRITES_UP_TO}",
        env!("CARGO_PKG_VERSION")
    );
    for r in raised.iter().flatten() {
        println!(
            "raised {} from format {} to {}",
            if r.cell.is_empty() {
                "the warehouse"
            } else {
                r.cell.as_str()
            },
            r.from,
            r.to
        );
    }
    for (cell, format) in &formats {
        println!(
            "{}: warehouse format {format}",
            if cell.is_empty() {
                "warehouse"
            } else {
                cell.as_str()
            }
        );
    }
    let now = crate::catalog::records::now_ms();
    for g in &gateways {
        println!(
            "gateway {} (lance-gateway {}, reads up to {}) seen {} s ago",
            g.node,
            g.release,
            g.reads_up_to,
            now.saturating_sub(g.seen_at_ms) / 1000
        );
    }
    Ok(())
}

/// `admin dropped`: the tables dropped in a namespace and kept for undrop.
async fn dropped(cat: &Catalog, namespace: Option<&str>, json_out: bool) -> Result<(), String> {
    let ns = parse(namespace)?;
    let list = cat
        .list_dropped(&Ctx::internal(), &ns)
        .await
        .map_err(|e| e.message)?;
    if json_out {
        println!("{}", json!({ "dropped": list }));
        return Ok(());
    }
    let now = crate::catalog::records::now_ms();
    for d in &list {
        println!(
            "{}  drop id {}  dropped {} min ago by {}  {}  purged in {} h  {}",
            join(&d.id, DEFAULT_DELIMITER),
            d.drop_id,
            now.saturating_sub(d.dropped_at_ms) / 60_000,
            d.dropped_by.as_deref().unwrap_or("-"),
            d.bytes
                .map_or("size unknown".to_string(), |b| format!("{b} bytes")),
            d.purge_after_ms.saturating_sub(now) / 3_600_000,
            d.location
        );
    }
    Ok(())
}

/// `admin undrop`.
async fn undrop(
    cat: &Catalog,
    id: &str,
    drop_id: Option<&str>,
    new_id: Option<&str>,
    json_out: bool,
) -> Result<(), String> {
    let id = parse(Some(id))?;
    let new_id = new_id.map(|n| parse(Some(n))).transpose()?;
    let record = cat
        .undrop_table(&Ctx::internal(), &id, drop_id, new_id.as_deref())
        .await
        .map_err(|e| e.message)?;
    if json_out {
        println!(
            "{}",
            json!({ "id": record.id, "location": record.location })
        );
    } else {
        println!(
            "undropped {} at {}",
            join(&record.id, DEFAULT_DELIMITER),
            record.location
        );
    }
    Ok(())
}

/// `admin purge`: the id typed twice, as the console asks for it.
async fn purge(
    cat: &Catalog,
    id: &str,
    drop_id: Option<&str>,
    confirm: &str,
    json_out: bool,
) -> Result<(), String> {
    if confirm != id {
        return Err(format!(
            "--confirm '{confirm}' is not the table's id '{id}': nothing purged"
        ));
    }
    let id = parse(Some(id))?;
    let purged = cat
        .purge_dropped(&Ctx::internal(), &id, drop_id)
        .await
        .map_err(|e| e.message)?;
    if json_out {
        println!(
            "{}",
            json!({ "id": purged.table.id, "drop_id": purged.drop_id, "location": purged.table.location })
        );
    } else {
        println!(
            "purged {} (drop id {}): {} is deleted",
            join(&purged.table.id, DEFAULT_DELIMITER),
            purged.drop_id,
            purged.table.location
        );
    }
    Ok(())
}

/// `admin maintain`: every table below `id` (or `id` itself, a table), one after another.
async fn maintain(
    cat: &Catalog,
    maintainer: &Maintainer,
    id: Option<&str>,
    how: &How,
    json_out: bool,
) -> i32 {
    let tables = match tables_below(cat, id).await {
        Ok(t) => t,
        Err(e) => {
            eprintln!("lance-gateway admin maintain: {e}");
            return 2;
        }
    };
    let mut failed = false;
    let mut reports = Vec::new();
    for table in tables {
        let report = match maintainer.maintain(&table, how).await {
            Ok(report) => report,
            Err(e) => {
                eprintln!(
                    "lance-gateway admin maintain: {}: {e}",
                    join(&table, DEFAULT_DELIMITER)
                );
                failed = true;
                continue;
            }
        };
        failed |= report.runs.iter().any(|r| r.outcome == "failed");
        if !json_out {
            print_maintenance(&report);
        }
        reports.push(report);
    }
    if json_out {
        println!("{}", json!({ "tables": reports }));
    }
    if failed { 1 } else { 0 }
}

/// The tables `id` names: itself if it is a table, else every table below the namespace
/// (the whole warehouse when `None`).
async fn tables_below(cat: &Catalog, id: Option<&str>) -> Result<Vec<Vec<String>>, String> {
    let id = parse(id)?;
    if !id.is_empty() && cat.describe_table(&Ctx::internal(), &id).await.is_ok() {
        return Ok(vec![id]);
    }
    if !id.is_empty() {
        cat.describe_namespace(&Ctx::internal(), &id)
            .await
            .map_err(|e| e.message)?;
    }
    let all = cat.all_table_ids().await.map_err(|e| e.message)?;
    Ok(all.into_iter().filter(|t| t.starts_with(&id)).collect())
}

fn print_maintenance(report: &crate::maintain::TableReport) {
    let table = join(&report.table, DEFAULT_DELIMITER);
    let figures = |f: &crate::jobs::Figures| {
        f.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    if let Some(why) = &report.skipped {
        println!("{table}: skipped: {why}");
        return;
    }
    if report.due.is_empty() {
        println!("{table}: nothing due ({})", figures(&report.figures));
        return;
    }
    println!(
        "{table}: due: {} ({})",
        report.due.join(", "),
        figures(&report.figures)
    );
    for run in &report.runs {
        println!(
            "  {:10} {:9} {}{}{}",
            run.task,
            run.outcome,
            run.transaction_id
                .as_deref()
                .map(|t| format!("transaction {t} "))
                .unwrap_or_default(),
            figures(&run.figures),
            run.error
                .as_deref()
                .map(|e| format!(" error: {e}"))
                .unwrap_or_default()
        );
    }
}

fn parse(id: Option<&str>) -> Result<Vec<String>, String> {
    match id {
        None | Some("") => Ok(Vec::new()),
        Some(text) => split_id(text, DEFAULT_DELIMITER).map_err(|e| e.message),
    }
}

async fn list(cat: &Catalog, id: Option<&str>, tables: bool, json_out: bool) -> Result<(), String> {
    let id = parse(id)?;
    let ctx = Ctx::internal();
    let mut items = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = if tables {
            cat.list_tables(&ctx, &id, token.as_deref(), Some(1000), true)
                .await
        } else {
            cat.list_namespaces(&ctx, &id, token.as_deref(), Some(1000))
                .await
        }
        .map_err(|e| e.message)?;
        items.extend(page.items);
        token = page.next;
        if token.is_none() {
            break;
        }
    }
    if json_out {
        println!(
            "{}",
            json!({ if tables { "tables" } else { "namespaces" }: items })
        );
    } else {
        for item in items {
            println!("{item}");
        }
    }
    Ok(())
}

async fn describe(cat: &Catalog, id: &str, json_out: bool) -> Result<(), String> {
    let id = parse(Some(id))?;
    let ctx = Ctx::internal();
    match cat.describe_table(&ctx, &id).await {
        Ok(record) => {
            let has_data = cat.has_data(&record).await.map_err(|e| e.message)?;
            let details = if has_data {
                Some(cat.dataset_details(&record).await)
            } else {
                None
            };
            let (version, error) = match &details {
                Some(Ok(d)) => (Some(d.version), None),
                Some(Err(e)) => (None, Some(e.detail.clone().unwrap_or(e.message.clone()))),
                None => (None, None),
            };
            if json_out {
                println!(
                    "{}",
                    json!({
                        "table": record.id, "location": record.location, "uid": record.uid,
                        "origin": record.origin, "created_at_ms": record.created_at_ms,
                        "properties": record.properties, "has_data": has_data,
                        "version": version, "dataset_error": error,
                    })
                );
            } else {
                println!("table       {}", join(&record.id, DEFAULT_DELIMITER));
                println!("location    {}", record.location);
                println!("uid         {}", record.uid);
                println!("origin      {}", record.origin);
                println!("created     {} ms", record.created_at_ms);
                match (has_data, version, error) {
                    (false, _, _) => println!("data        none yet (declared)"),
                    (true, _, Some(e)) => println!("data        does not open: {e}"),
                    (true, v, None) => println!(
                        "data        Lance dataset, version {}",
                        v.map(|v| v.to_string()).unwrap_or_else(|| "?".into())
                    ),
                }
                for (k, v) in &record.properties {
                    println!("property    {k} = {v}");
                }
            }
            Ok(())
        }
        Err(table_err) => match cat.describe_namespace(&ctx, &id).await {
            Ok(properties) => {
                if json_out {
                    println!("{}", json!({ "namespace": id, "properties": properties }));
                } else {
                    println!("namespace   {}", join(&id, DEFAULT_DELIMITER));
                    for (k, v) in &properties {
                        println!("property    {k} = {v}");
                    }
                }
                Ok(())
            }
            Err(_) => Err(table_err.message),
        },
    }
}

fn print_report(report: &Report, json_out: bool) {
    if json_out {
        let value = json!({
            "clean": report.left() == 0,
            "problems_found": report.findings.len(),
            "problems_left": report.left(),
            "report": report,
        });
        println!("{value}");
        return;
    }
    println!(
        "checked {} namespaces, {} tables, {} folder claims, {} datasets, {} unfinished operations",
        report.namespaces,
        report.tables,
        report.claims,
        report.datasets,
        report.operations_in_flight
    );
    for f in &report.findings {
        println!(
            "{:9} {:24} {}: {}",
            if f.repaired { "repaired" } else { f.severity },
            f.problem,
            f.object,
            f.detail
        );
    }
    let repaired = report.findings.iter().filter(|f| f.repaired).count();
    if report.left() == 0 && repaired == 0 && report.findings.is_empty() {
        println!("clean");
    } else {
        println!(
            "{} found, {} repaired, {} problems left",
            report.findings.len(),
            repaired,
            report.left()
        );
    }
}

/// Where a backup is written or read: standard output or input (`-`), a file, or an object
/// in an S3 bucket (`s3://bucket/key`) reached with the same S3 settings as the warehouse
/// (endpoint, region, keys), so backups can be kept in another bucket of the same store.
enum BackupPlace {
    Std,
    File(std::path::PathBuf),
    Object {
        uri: String,
        store: Arc<dyn crate::store::Store>,
        key: String,
    },
}

impl BackupPlace {
    async fn of(common: &AdminCommon, text: &str) -> Result<Self, String> {
        if text == "-" {
            return Ok(Self::Std);
        }
        let Some(rest) = text.strip_prefix("s3://") else {
            if text.contains("://") {
                return Err(format!(
                    "'{text}': a backup goes to a file, `-`, or s3://bucket/key"
                ));
            }
            return Ok(Self::File(text.into()));
        };
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        let key = key.trim_start_matches('/');
        if key.is_empty() || key.ends_with('/') {
            return Err(format!(
                "'{text}': name the backup's object, s3://bucket/key"
            ));
        }
        crate::catalog::layout::validate_bucket(bucket).map_err(|e| e.message)?;
        // The warehouse's settings, pointed at the backup's bucket.
        let mut args = common.serve.clone();
        args.settings.warehouse = Some(format!("s3://{bucket}"));
        let config = Config::load(args).map_err(|e| e.to_string())?;
        let parts = build_parts(&config, true).await?;
        Ok(Self::Object {
            uri: text.to_string(),
            store: parts.store,
            key: key.to_string(),
        })
    }

    async fn read(&self) -> Result<crate::catalog::backup::Backup, String> {
        let text = match self {
            Self::Std => std::io::read_to_string(std::io::stdin())
                .map_err(|e| format!("reading the backup: {e}"))?,
            Self::File(path) => std::fs::read_to_string(path)
                .map_err(|e| format!("reading the backup {}: {e}", path.display()))?,
            Self::Object { uri, store, key } => match store.get(key).await {
                Ok(Some(object)) => String::from_utf8(object.body.to_vec())
                    .map_err(|_| format!("{uri} is not a backup (not UTF-8)"))?,
                Ok(None) => return Err(format!("reading the backup {uri}: no such object")),
                Err(e) => return Err(format!("reading the backup {uri}: {e}")),
            },
        };
        crate::catalog::backup::Backup::from_lines(&text).map_err(|e| e.message)
    }

    /// Writes the whole backup or nothing: a file is written beside and moved into place,
    /// an object is one PUT, so a cut-short copy never stands as a backup.
    async fn write(&self, text: String) -> Result<(), String> {
        match self {
            Self::Std => {
                print!("{text}");
                Ok(())
            }
            Self::File(to) => {
                let partial = to.with_extension("partial");
                std::fs::write(&partial, &text)
                    .and_then(|_| std::fs::rename(&partial, to))
                    .map_err(|e| format!("writing the backup {}: {e}", to.display()))
            }
            Self::Object { uri, store, key } => store
                .put(key, text.into(), crate::store::Condition::None)
                .await
                .map(|_| ())
                .map_err(|e| format!("writing the backup {uri}: {e}")),
        }
    }

    fn show(&self) -> String {
        match self {
            Self::Std => "standard output".into(),
            Self::File(path) => path.display().to_string(),
            Self::Object { uri, .. } => uri.clone(),
        }
    }
}

async fn read_backup(
    common: &AdminCommon,
    from: &str,
) -> Result<crate::catalog::backup::Backup, String> {
    BackupPlace::of(common, from).await?.read().await
}

async fn backup(
    cat: &Catalog,
    common: &AdminCommon,
    to: &str,
    json_out: bool,
) -> Result<(), String> {
    let started = std::time::Instant::now();
    let place = BackupPlace::of(common, to).await?;
    let copy = cat.backup().await.map_err(|e| e.to_string())?;
    let text = copy.to_lines().map_err(|e| e.to_string())?;
    let to_stdout = matches!(place, BackupPlace::Std);
    place.write(text).await?;
    if to_stdout {
        return Ok(());
    }
    let header = copy.header.as_ref().expect("a backup has its header");
    if json_out {
        println!(
            "{}",
            json!({"to": place.show(), "header": header, "seconds": started.elapsed().as_secs_f64()})
        );
    } else {
        eprintln!(
            "backed up {} objects ({} tables) of {} to {} in {:.1} s ({} passes)",
            header.objects,
            header.tables,
            header.warehouse,
            place.show(),
            started.elapsed().as_secs_f64(),
            header.passes
        );
    }
    Ok(())
}

async fn restore(
    cat: &Catalog,
    common: &AdminCommon,
    from: &str,
    force: bool,
    json_out: bool,
) -> Result<(), String> {
    let started = std::time::Instant::now();
    let copy = read_backup(common, from).await?;
    let done = cat.restore(&copy, force).await.map_err(|e| e.message)?;
    if json_out {
        println!(
            "{}",
            json!({"restored": done, "seconds": started.elapsed().as_secs_f64()})
        );
    } else {
        eprintln!(
            "restored {} objects ({} tables, {} pointed at their folders here) in {:.1} s; run `admin verify` to check the data is there",
            done.objects,
            done.tables,
            done.relocated,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

async fn verify(cat: &Catalog, common: &AdminCommon, from: Option<&str>, json_out: bool) -> i32 {
    let copy = match from {
        None => None,
        Some(from) => match read_backup(common, from).await {
            Ok(copy) => Some(copy),
            Err(e) => {
                eprintln!("lance-gateway admin: {e}");
                return 2;
            }
        },
    };
    let found = match cat.verify(copy.as_ref()).await {
        Ok(f) => f,
        Err(e) => {
            eprintln!("lance-gateway admin: {e}");
            return 2;
        }
    };
    let missing = found.iter().filter(|v| v.state != "ok").count();
    if json_out {
        println!("{}", json!({"tables": found, "missing": missing}));
    } else {
        for v in found.iter().filter(|v| v.state != "ok") {
            println!(
                "missing {} at {}: expected version {:?}, storage has {:?}",
                v.id.join("$"),
                v.location,
                v.expected,
                v.found
            );
        }
        println!("{} tables, {missing} missing", found.len());
    }
    i32::from(missing > 0)
}
