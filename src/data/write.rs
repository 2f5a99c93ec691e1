//! Writes: create, insert (append or overwrite), merge-insert, update and delete. Each is one
//! Lance commit, so it either makes a new version or leaves the table as it was; each
//! answers with the version it made.

use std::sync::Arc;
use std::time::Duration;

use lance::Dataset;
use lance::dataset::{
    InsertBuilder, MergeInsertBuilder, UpdateBuilder, WhenMatched, WhenNotMatched,
    WhenNotMatchedBySource, WriteDestination, WriteMode, WriteParams,
};

use super::ipc::{Arriving, GATHER_BYTES, Rows, Upload};
use super::{At, LanceDatasets, TableData, lance_error};
use crate::error::{Code, Error, Result};

/// What a write made.
#[derive(Clone, Copy, Debug, Default)]
pub struct Written {
    pub version: u64,
    pub inserted: u64,
    pub updated: u64,
    pub deleted: u64,
}

/// Writes `upload` as a new dataset at the table's location (a zero-batch upload makes an empty table
/// with its schema). With `overwrite`, an existing dataset there gets a new version.
pub async fn create(
    datasets: &LanceDatasets,
    table: &TableData,
    upload: Upload,
    overwrite: bool,
) -> Result<Written> {
    let params = WriteParams {
        mode: if overwrite {
            WriteMode::Overwrite
        } else {
            WriteMode::Create
        },
        store_params: Some(datasets.store_params().await?),
        session: Some(datasets.session()),
        commit_handler: datasets.commit_handler(table),
        ..Default::default()
    };
    write_into(table.location.as_str(), &params, upload.into()).await
}

/// Writes `upload` to `dest` as one commit; answers the version made and the rows written.
async fn write_into<'a>(
    dest: impl Into<WriteDestination<'a>>,
    params: &WriteParams,
    rows: Rows,
) -> Result<Written> {
    let count = rows.count.clone();
    let dataset = InsertBuilder::new(dest)
        .with_params(params)
        .execute_stream(rows.stream)
        .await
        .map_err(lance_error)?;
    Ok(Written {
        version: dataset.version().version,
        inserted: count.load(std::sync::atomic::Ordering::Relaxed),
        ..Default::default()
    })
}

/// Appends `upload` to (or, with `overwrite`, replaces the rows of) the dataset at
/// the table: gathered whole first, or, past `GATHER_BYTES`, written as the rest arrives.
/// A table that holds no data yet is created by it (from the whole upload, so that a rival's
/// first write can be followed).
pub async fn insert(
    datasets: &LanceDatasets,
    table: &TableData,
    at: &At,
    upload: Arriving,
    overwrite: bool,
) -> Result<Written> {
    let (dataset, rows): (_, Rows) = match open_or_first(datasets, table, at).await? {
        Some(dataset) => (Arc::new(dataset), upload.rows(GATHER_BYTES).await?),
        None => {
            let whole = upload.gather().await?;
            match create(datasets, table, whole.clone(), false).await {
                // A rival's first write got there first: append after it.
                Err(e) if e.code == Code::TableAlreadyExists => {
                    (Arc::new(datasets.open(table, at).await?), whole.into())
                }
                done => return done,
            }
        }
    };
    let params = WriteParams {
        mode: if overwrite {
            WriteMode::Overwrite
        } else {
            WriteMode::Append
        },
        session: Some(datasets.session()),
        ..Default::default()
    };
    write_into(dataset, &params, rows).await
}

/// The table's dataset, or None when the table holds no data yet (then the write creates
/// it, which only the main branch may).
async fn open_or_first(
    datasets: &LanceDatasets,
    table: &TableData,
    at: &At,
) -> Result<Option<Dataset>> {
    match datasets.open(table, at).await {
        Ok(dataset) => Ok(Some(dataset)),
        Err(e) if e.code == Code::InvalidTableState => {
            if at.branch.is_some() {
                return Err(Error::invalid(
                    "the table holds no data yet: its first write must be on the main branch",
                ));
            }
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// MergeInsertIntoTable's options, as the query string gives them.
#[derive(Clone, Debug, Default)]
pub struct MergeOptions {
    pub on: Vec<String>,
    pub when_matched_update_all: bool,
    pub when_matched_update_all_filt: Option<String>,
    pub when_not_matched_insert_all: bool,
    pub when_not_matched_by_source_delete: bool,
    pub when_not_matched_by_source_delete_filt: Option<String>,
    pub timeout: Option<Duration>,
    pub use_index: bool,
}

/// Parses a duration such as `30s`, `5m`, `1h`, `250ms` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let text = text.trim();
    let bad = || {
        Error::invalid(format!(
            "'{text}' is not a duration (use forms like 30s, 5m, 1h or 250ms)"
        ))
    };
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit.trim() {
        "" | "s" | "sec" | "secs" => number,
        "ms" => number / 1000.0,
        "m" | "min" | "mins" => number * 60.0,
        "h" => number * 3600.0,
        _ => return Err(bad()),
    };
    if !seconds.is_finite() || !(0.0..=86_400.0).contains(&seconds) {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Merges `upload` into the dataset by the `on` keys. A table with no data yet is created
/// from the upload (every row is then "not matched").
pub async fn merge_insert(
    datasets: &LanceDatasets,
    table: &TableData,
    at: &At,
    upload: Upload,
    options: MergeOptions,
) -> Result<Written> {
    if options.on.is_empty() {
        return Err(Error::invalid(
            "merge_insert needs at least one `on` key column",
        ));
    }
    let Some(dataset) = open_or_first(datasets, table, at).await? else {
        if !options.when_not_matched_insert_all {
            return Err(Error::invalid(
                "the table holds no data yet and when_not_matched_insert_all is false: nothing would be written",
            ));
        }
        return create(datasets, table, upload, false).await;
    };
    let dataset = Arc::new(dataset);
    for key in &options.on {
        if dataset.schema().field(key).is_none() {
            return Err(Error::new(
                Code::TableColumnNotFound,
                format!("the merge key column '{key}' is not in the table"),
            ));
        }
    }
    let mut builder =
        MergeInsertBuilder::try_new(dataset.clone(), options.on.clone()).map_err(lance_error)?;
    let matched = match (
        options.when_matched_update_all,
        &options.when_matched_update_all_filt,
    ) {
        (true, Some(filter)) => WhenMatched::update_if(&dataset, filter).map_err(lance_error)?,
        (true, None) => WhenMatched::UpdateAll,
        (false, _) => WhenMatched::DoNothing,
    };
    builder.when_matched(matched);
    builder.when_not_matched(if options.when_not_matched_insert_all {
        WhenNotMatched::InsertAll
    } else {
        WhenNotMatched::DoNothing
    });
    let by_source = match (
        options.when_not_matched_by_source_delete,
        &options.when_not_matched_by_source_delete_filt,
    ) {
        (true, Some(filter)) => {
            WhenNotMatchedBySource::delete_if(&dataset, filter).map_err(lance_error)?
        }
        (true, None) => WhenNotMatchedBySource::Delete,
        (false, _) => WhenNotMatchedBySource::Keep,
    };
    builder.when_not_matched_by_source(by_source);
    builder.use_index(options.use_index);
    if let Some(timeout) = options.timeout {
        builder.retry_timeout(timeout);
    }
    let job = builder.try_build().map_err(lance_error)?;
    let (merged, stats) = job
        .execute_reader(upload.reader())
        .await
        .map_err(lance_error)?;
    Ok(Written {
        version: merged.version().version,
        inserted: stats.num_inserted_rows,
        updated: stats.num_updated_rows,
        deleted: stats.num_deleted_rows,
    })
}

/// Sets columns to SQL expressions on the rows matching `predicate` (all rows without one).
pub async fn update(
    datasets: &LanceDatasets,
    table: &TableData,
    at: &At,
    updates: &[(String, String)],
    predicate: Option<&str>,
) -> Result<Written> {
    if updates.is_empty() {
        return Err(Error::invalid(
            "update needs at least one [column, expression] pair",
        ));
    }
    let dataset = Arc::new(datasets.open(table, at).await?);
    let mut builder = UpdateBuilder::new(dataset);
    if let Some(predicate) = predicate.filter(|p| !p.trim().is_empty()) {
        builder = builder.update_where(predicate).map_err(lance_error)?;
    }
    for (column, expression) in updates {
        builder = builder.set(column, expression).map_err(lance_error)?;
    }
    let result = builder
        .build()
        .map_err(lance_error)?
        .execute()
        .await
        .map_err(lance_error)?;
    Ok(Written {
        version: result.new_dataset.version().version,
        updated: result.rows_updated,
        ..Default::default()
    })
}

/// Deletes the rows matching `predicate`.
pub async fn delete(
    datasets: &LanceDatasets,
    table: &TableData,
    at: &At,
    predicate: &str,
) -> Result<Written> {
    if predicate.trim().is_empty() {
        return Err(Error::invalid(
            "delete needs a predicate (use 'true' to delete every row)",
        ));
    }
    let mut dataset: Dataset = datasets.open(table, at).await?;
    let result = dataset.delete(predicate).await.map_err(lance_error)?;
    Ok(Written {
        version: result.new_dataset.version().version,
        deleted: result.num_deleted_rows,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_the_clients_forms() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        for bad in ["", "s", "ten seconds", "-3s", "5y", "1e9s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
