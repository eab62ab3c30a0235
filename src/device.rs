//! Choosing where inference runs: `cpu`, `cuda` or `auto`, and what precision
//! that device can honour.

use std::fmt;
use std::str::FromStr;

use crate::backend::Precision;

#[derive(Clone, Debug, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(try_from = "String", into = "String")]
pub enum DeviceRequest {
    Cpu,
    /// CUDA devices by ordinal; empty means all.
    Cuda(Vec<usize>),
    #[default]
    Auto,
}

/// A `--device` / `model.device` value that is not understood.
#[derive(Debug, thiserror::Error)]
pub enum DeviceParseError {
    #[error("unknown device '{0}' (expected cpu, cuda, cuda:0,1 or auto)")]
    Unknown(String),
    #[error("bad CUDA device list '{list}' (expected e.g. cuda:0,1)")]
    BadList { list: String, source: std::num::ParseIntError },
}

impl FromStr for DeviceRequest {
    type Err = DeviceParseError;
    fn from_str(s: &str) -> Result<Self, DeviceParseError> {
        let s = s.trim().to_ascii_lowercase();
        match s.as_str() {
            "cpu" => Ok(DeviceRequest::Cpu),
            "auto" => Ok(DeviceRequest::Auto),
            "cuda" | "gpu" => Ok(DeviceRequest::Cuda(Vec::new())),
            _ => {
                let list = s.strip_prefix("cuda:").ok_or_else(|| DeviceParseError::Unknown(s.clone()))?;
                list.split(',')
                    .map(|d| d.trim().parse::<usize>().map_err(|source| DeviceParseError::BadList { list: list.to_string(), source }))
                    .collect::<Result<Vec<_>, _>>()
                    .map(DeviceRequest::Cuda)
            }
        }
    }
}

impl TryFrom<String> for DeviceRequest {
    type Error = DeviceParseError;
    fn try_from(s: String) -> Result<Self, DeviceParseError> {
        s.parse()
    }
}

impl From<DeviceRequest> for String {
    fn from(d: DeviceRequest) -> String {
        d.to_string()
    }
}

impl fmt::Display for DeviceRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceRequest::Cpu => f.write_str("cpu"),
            DeviceRequest::Auto => f.write_str("auto"),
            DeviceRequest::Cuda(ids) if ids.is_empty() => f.write_str("cuda"),
            DeviceRequest::Cuda(ids) => {
                let ids: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
                write!(f, "cuda:{}", ids.join(","))
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("--device {0} asked for CUDA, but this roadseg was built without the `cuda` feature; use --device cpu (or auto)")]
    NotBuilt(DeviceRequest),
    #[cfg(feature = "cuda")]
    #[error("--device {request}: CUDA is not usable here: {reason}. Use --device cpu, or auto to fall back to the CPU")]
    CudaUnavailable { request: DeviceRequest, reason: crate::backend::cuda::CudaUnavailable },
}

/// Where inference runs.
#[derive(Clone, Debug)]
pub enum Target {
    Cpu,
    #[cfg(feature = "cuda")]
    Cuda { info: crate::backend::cuda::CudaInfo, gpus: Vec<crate::backend::cuda::GpuInfo> },
}

/// The device and precision inference will actually use.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub target: Target,
    /// For logs and metrics: `cpu`, or `cuda:0,1`.
    pub device: String,
    pub precision: Precision,
    /// Human-readable reasons the request was not honoured as asked.
    pub warnings: Vec<String>,
}

impl Resolved {
    pub fn is_cpu(&self) -> bool {
        matches!(self.target, Target::Cpu)
    }
}

/// Picks the device for `request`. `precision` None means the device's
/// default: fp16 on CUDA, f32 on the CPU (which computes only in f32).
pub fn resolve(request: &DeviceRequest, precision: Option<Precision>) -> Result<Resolved, DeviceError> {
    let mut warnings = Vec::new();
    match request {
        DeviceRequest::Cpu => {}
        #[cfg(feature = "cuda")]
        DeviceRequest::Cuda(ids) => {
            return match find_gpus(ids) {
                Ok((info, gpus)) => Ok(cuda_target(info, gpus, precision)),
                Err(reason) => Err(DeviceError::CudaUnavailable { request: request.clone(), reason }),
            };
        }
        #[cfg(not(feature = "cuda"))]
        DeviceRequest::Cuda(_) => return Err(DeviceError::NotBuilt(request.clone())),
        #[cfg(feature = "cuda")]
        DeviceRequest::Auto => match find_gpus(&[]) {
            Ok((info, gpus)) => return Ok(cuda_target(info, gpus, precision)),
            Err(reason) => warnings.push(format!("CUDA is not usable ({reason}); running on the CPU")),
        },
        #[cfg(not(feature = "cuda"))]
        DeviceRequest::Auto => warnings.push("this roadseg was built without CUDA; running on the CPU".to_string()),
    }
    let precision = match precision {
        Some(p) if p != Precision::F32 => {
            warnings.push(format!("precision {p} is not available on the CPU; using f32"));
            Precision::F32
        }
        _ => Precision::F32,
    };
    Ok(Resolved { target: Target::Cpu, device: "cpu".to_string(), precision, warnings })
}

/// The usable GPUs among `ids` (`[]` = all), or why there are none.
#[cfg(feature = "cuda")]
fn find_gpus(ids: &[usize]) -> Result<(crate::backend::cuda::CudaInfo, Vec<crate::backend::cuda::GpuInfo>), crate::backend::cuda::CudaUnavailable> {
    use crate::backend::cuda::probe;
    let info = probe::probe()?;
    let gpus = probe::select(&info, ids)?;
    Ok((info, gpus))
}

#[cfg(feature = "cuda")]
fn cuda_target(info: crate::backend::cuda::CudaInfo, gpus: Vec<crate::backend::cuda::GpuInfo>, precision: Option<Precision>) -> Resolved {
    let ids: Vec<String> = gpus.iter().map(|g| g.ordinal.to_string()).collect();
    Resolved {
        device: format!("cuda:{}", ids.join(",")),
        target: Target::Cuda { info, gpus },
        precision: precision.unwrap_or(Precision::Fp16),
        warnings: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_device_lists() {
        assert_eq!("cuda:0,1".parse::<DeviceRequest>().unwrap(), DeviceRequest::Cuda(vec![0, 1]));
        assert_eq!("CPU".parse::<DeviceRequest>().unwrap(), DeviceRequest::Cpu);
        assert!("tpu".parse::<DeviceRequest>().is_err());
        assert!("cuda:x".parse::<DeviceRequest>().is_err());
    }

    #[test]
    fn cpu_falls_back_to_f32_with_a_warning() {
        let r = resolve(&DeviceRequest::Cpu, Some(Precision::Fp16)).unwrap();
        assert_eq!(r.precision, Precision::F32);
        assert_eq!(r.warnings.len(), 1);
    }

    #[test]
    fn auto_without_a_gpu_falls_back_to_the_cpu_with_a_reason() {
        let r = resolve(&DeviceRequest::Auto, None).unwrap();
        if r.is_cpu() {
            assert_eq!(r.precision, Precision::F32);
            assert!(r.warnings.iter().any(|w| w.contains("running on the CPU")), "{:?}", r.warnings);
        }
    }
}
