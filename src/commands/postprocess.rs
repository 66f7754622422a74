use crate::cli::PostprocessArgs;
use anyhow::Result;

pub fn run(_args: PostprocessArgs) -> Result<()> {
    anyhow::bail!("postprocess is not wired yet")
}
