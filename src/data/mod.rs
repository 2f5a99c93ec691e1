//! The lance-backed data plane. Today it reads what DescribeTable reports with
//! `load_detailed_metadata`: the latest version, the schema and fragment statistics.

use std::collections::HashMap;

use async_trait::async_trait;
use lance::dataset::builder::DatasetBuilder;

use crate::catalog::{DatasetDetails, DatasetReader};
use crate::error::{Error, Result};
use crate::vend::Vendor;

/// Opens datasets with the gateway's own access to the warehouse.
pub struct LanceDatasets {
    access: Vendor,
}

impl LanceDatasets {
    /// `access` must vend the gateway's own credentials (or none, on a local warehouse).
    pub fn new(access: Vendor) -> Self {
        LanceDatasets { access }
    }

    async fn options(&self) -> Result<HashMap<String, String>> {
        self.access.plain(true).await
    }
}

#[async_trait]
impl DatasetReader for LanceDatasets {
    async fn describe(&self, location: &str) -> Result<DatasetDetails> {
        let dataset = DatasetBuilder::from_uri(location)
            .with_storage_options(self.options().await?)
            .load()
            .await
            .map_err(|e| {
                Error::unavailable(format!("could not open the dataset at '{location}'"))
                    .with_detail(e.to_string())
            })?;
        let arrow = arrow_schema::Schema::from(dataset.schema());
        let schema = lance_namespace::schema::arrow_schema_to_json(&arrow)
            .map_err(|e| Error::internal("could not describe the dataset's schema", e))?;
        let deleted = dataset.count_deleted_rows().await.map_err(|e| {
            Error::unavailable("could not read the dataset's deletions").with_detail(e.to_string())
        })?;
        Ok(DatasetDetails {
            version: dataset.version().version as i64,
            schema: Some(schema),
            num_deleted_rows: deleted as i64,
            num_fragments: dataset.get_fragments().len() as i64,
            metadata: dataset.metadata().clone(),
        })
    }
}
