//! GPU gauges from NVML (the library behind nvidia-smi), sampled on their own
//! thread. NVML is loaded at run time: on a machine without it the daemon says
//! so once and runs without these gauges.

use std::thread::JoinHandle;
use std::time::Duration;

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;

use super::metrics::GpuMetrics;
use crate::backend::cuda::GpuInfo;

/// How often the gauges are refreshed (a Prometheus scrape is usually 15 s).
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);

pub struct GpuMonitor {
    /// Dropped to stop the thread.
    stop: crossbeam_channel::Sender<()>,
    handle: JoinHandle<()>,
}

impl GpuMonitor {
    /// Starts sampling `gpus` (found in NVML by PCI bus id, labelled by CUDA
    /// ordinal); None when NVML is unavailable or knows none of them.
    pub fn start(gpus: &[GpuInfo]) -> Option<GpuMonitor> {
        let nvml = match Nvml::init() {
            Ok(n) => n,
            Err(e) => {
                tracing::info!("no GPU gauges: NVML is not available ({e})");
                return None;
            }
        };
        let targets: Vec<(String, GpuMetrics)> = gpus
            .iter()
            .filter(|g| nvml.device_by_pci_bus_id(g.pci_bus_id.as_str()).is_ok())
            .map(|g| (g.pci_bus_id.clone(), GpuMetrics::new(&format!("cuda:{}", g.ordinal))))
            .collect();
        if targets.is_empty() {
            tracing::info!("no GPU gauges: NVML does not list the GPUs in use");
            return None;
        }
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let handle = std::thread::Builder::new()
            .name("gpu-gauges".into())
            .spawn(move || {
                loop {
                    for (bus, m) in &targets {
                        sample(&nvml, bus, m);
                    }
                    if !matches!(stopped.recv_timeout(SAMPLE_EVERY), Err(crossbeam_channel::RecvTimeoutError::Timeout)) {
                        return;
                    }
                }
            })
            .ok()?;
        Some(GpuMonitor { stop, handle })
    }

    pub fn stop(self) {
        drop(self.stop);
        let _ = self.handle.join();
    }
}

/// One reading; a query the GPU does not support leaves its gauge alone.
fn sample(nvml: &Nvml, bus: &str, m: &GpuMetrics) {
    let Ok(device) = nvml.device_by_pci_bus_id(bus) else { return };
    if let Ok(u) = device.utilization_rates() {
        m.utilization.set(f64::from(u.gpu) / 100.0);
    }
    if let Ok(mem) = device.memory_info() {
        m.memory_used.set(mem.used as f64);
    }
    if let Ok(t) = device.temperature(TemperatureSensor::Gpu) {
        m.temperature.set(f64::from(t));
    }
    if let Ok(mw) = device.power_usage() {
        m.power.set(f64::from(mw) / 1000.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_gpus_or_no_nvml_give_no_monitor_and_no_panic() {
        // Rule: GPU gauges are optional: a machine without NVML (or a GPU NVML does not list) just has none.
        let ghost = GpuInfo {
            ordinal: 0,
            name: "none".into(),
            compute_capability: (9, 0),
            memory_bytes: 0,
            pci_bus_id: "ffff:ff:1f.7".into(),
        };
        assert!(GpuMonitor::start(&[ghost]).is_none());
    }
}
