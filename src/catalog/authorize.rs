//! The catalog's access checks, one per kind of operation, so every public operation asks
//! the same question the same way (`access.rs` has the rules). What the caller may not see
//! answers as missing; what it sees but may not change answers PermissionDenied. Every
//! refusal is noted on the request for the audit log.

use super::Catalog;
use crate::access::{Ctx, Level};
use crate::error::{Error, Result};

impl Catalog {
    /// What `ctx`'s caller may do with `id`.
    pub fn access(&self, ctx: &Ctx, id: &[String]) -> Level {
        self.grants.level(ctx, id)
    }

    /// Whether `ctx`'s caller may see namespace `id`.
    pub(crate) fn sees_namespace(&self, ctx: &Ctx, id: &[String]) -> bool {
        self.grants.sees_namespace(ctx, id)
    }

    /// Whether `ctx`'s caller may see table `id`.
    pub(crate) fn sees_table(&self, ctx: &Ctx, id: &[String]) -> bool {
        self.access(ctx, id) >= Level::Read
    }

    fn refuse(&self, ctx: &Ctx, error: Error, needed: Level, id: &[String]) -> Error {
        ctx.note_denied(format!("{} on {}", needed.name(), self.show(id)));
        crate::telemetry::denial(needed.name());
        error
    }

    /// Reading namespace `id` (describe, exists, listing its children).
    pub(crate) fn may_see_namespace(&self, ctx: &Ctx, id: &[String]) -> Result<()> {
        if self.sees_namespace(ctx, id) {
            return Ok(());
        }
        Err(self.refuse(
            ctx,
            Error::namespace_not_found(&self.show(id)),
            Level::Read,
            id,
        ))
    }

    /// Creating namespace `id`, or replacing its properties: admin on it.
    pub(crate) fn may_create_namespace(&self, ctx: &Ctx, id: &[String]) -> Result<()> {
        if self.access(ctx, id) >= Level::Admin {
            return Ok(());
        }
        let parent = &id[..id.len().saturating_sub(1)];
        let error = if self.sees_namespace(ctx, parent) || self.sees_namespace(ctx, id) {
            Error::permission_denied(format!(
                "creating namespace '{}' needs admin access",
                self.show(id)
            ))
        } else {
            Error::namespace_not_found(&self.show(parent))
        };
        Err(self.refuse(ctx, error, Level::Admin, id))
    }

    /// Dropping namespace `id`: admin on it.
    pub(crate) fn may_drop_namespace(&self, ctx: &Ctx, id: &[String]) -> Result<()> {
        if self.access(ctx, id) >= Level::Admin {
            return Ok(());
        }
        let error = if self.sees_namespace(ctx, id) {
            Error::permission_denied(format!(
                "dropping namespace '{}' needs admin access",
                self.show(id)
            ))
        } else {
            Error::namespace_not_found(&self.show(id))
        };
        Err(self.refuse(ctx, error, Level::Admin, id))
    }

    /// The error for a table the caller may not see: as if it were missing.
    fn hidden_table(&self, ctx: &Ctx, id: &[String]) -> Error {
        let parent = &id[..id.len().saturating_sub(1)];
        if self.sees_namespace(ctx, parent) {
            Error::table_not_found(&self.show(id))
        } else {
            Error::namespace_not_found(&self.show(parent))
        }
    }

    /// Reading table `id` (describe, exists): read on it.
    pub(crate) fn may_read_table(&self, ctx: &Ctx, id: &[String]) -> Result<Level> {
        let level = self.access(ctx, id);
        if level >= Level::Read {
            return Ok(level);
        }
        Err(self.refuse(ctx, self.hidden_table(ctx, id), Level::Read, id))
    }

    /// Creating table `id` (declare, register, the target of a rename): write on it.
    pub(crate) fn may_create_table(&self, ctx: &Ctx, id: &[String]) -> Result<Level> {
        let level = self.access(ctx, id);
        if level >= Level::Write {
            return Ok(level);
        }
        let parent = &id[..id.len().saturating_sub(1)];
        let error = if self.sees_namespace(ctx, parent) {
            Error::permission_denied(format!(
                "creating table '{}' needs write access",
                self.show(id)
            ))
        } else {
            Error::namespace_not_found(&self.show(parent))
        };
        Err(self.refuse(ctx, error, Level::Write, id))
    }

    /// Removing table `id` (drop, deregister, the source of a rename): admin on it.
    pub(crate) fn may_remove_table(&self, ctx: &Ctx, id: &[String]) -> Result<()> {
        let level = self.access(ctx, id);
        if level >= Level::Admin {
            return Ok(());
        }
        let error = if level >= Level::Read {
            Error::permission_denied(format!(
                "removing or renaming table '{}' needs admin access",
                self.show(id)
            ))
        } else {
            self.hidden_table(ctx, id)
        };
        Err(self.refuse(ctx, error, Level::Admin, id))
    }

    /// A data operation on table `id` that needs `needed` (write for writes, admin for
    /// destructive index and schema changes). A caller who may not even read the table is
    /// told it is missing.
    pub(crate) fn may_change_table(
        &self,
        ctx: &Ctx,
        id: &[String],
        needed: Level,
        what: &str,
    ) -> Result<()> {
        let level = self.access(ctx, id);
        if level >= needed {
            return Ok(());
        }
        let error = if level >= Level::Read {
            Error::permission_denied(format!(
                "{what} on table '{}' needs {} access",
                self.show(id),
                needed.name()
            ))
        } else {
            self.hidden_table(ctx, id)
        };
        Err(self.refuse(ctx, error, needed, id))
    }
}
