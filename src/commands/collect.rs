use crate::cli::CollectArgs;
use anyhow::Result;

pub fn run(_args: CollectArgs) -> Result<()> {
    anyhow::bail!("collect is not wired yet")
}
