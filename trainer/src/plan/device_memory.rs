//! How much memory the device a run uses has: the GPU's free memory, or the
//! host's available memory for the CPU.

use crate::error::{Error, Result};
use candle_core::Device;

/// Bytes a run may use on `device`, and where the figure comes from.
pub fn available(device: &Device) -> Result<(u64, &'static str)> {
    match device {
        Device::Cpu => host_available().map(|b| (b, "the host (MemAvailable)")),
        #[cfg(feature = "cuda")]
        Device::Cuda(d) => {
            let (free, _total) = d.cuda_stream().context().mem_get_info().map_err(|e| Error::invalid("memory plan", format!("querying the GPU's memory: {e}")))?;
            Ok((free as u64, "the GPU (free memory)"))
        }
        #[allow(unreachable_patterns)]
        other => Err(Error::invalid("memory plan", format!("no memory query for {other:?}; pass --gpu-memory"))),
    }
}

/// `MemAvailable` from /proc/meminfo.
fn host_available() -> Result<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").map_err(|e| Error::io("/proc/meminfo", e))?;
    text.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or_else(|| Error::invalid("memory plan", "/proc/meminfo has no MemAvailable line; pass --gpu-memory"))
}
