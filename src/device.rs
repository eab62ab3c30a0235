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

impl FromStr for DeviceRequest {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim().to_ascii_lowercase();
        match s.as_str() {
            "cpu" => Ok(DeviceRequest::Cpu),
            "auto" => Ok(DeviceRequest::Auto),
            "cuda" | "gpu" => Ok(DeviceRequest::Cuda(Vec::new())),
            _ => {
                let list = s.strip_prefix("cuda:").ok_or_else(|| format!("unknown device '{s}' (expected cpu, cuda, cuda:0,1 or auto)"))?;
                list.split(',')
                    .map(|d| d.trim().parse::<usize>().map_err(|_| format!("bad CUDA device list '{list}' (expected e.g. cuda:0,1)")))
                    .collect::<Result<Vec<_>, _>>()
                    .map(DeviceRequest::Cuda)
            }
        }
    }
}

impl TryFrom<String> for DeviceRequest {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
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
    #[error(
        "--device {0} asked for CUDA, but this roadseg build has no CUDA backend yet; use --device cpu (or auto, which falls back to the CPU)"
    )]
    CudaUnavailable(DeviceRequest),
}

/// The device and precision inference will actually use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub device: &'static str,
    pub precision: Precision,
    /// Human-readable reasons the request was not honoured as asked.
    pub warnings: Vec<String>,
}

pub fn resolve(request: &DeviceRequest, precision: Precision) -> Result<Resolved, DeviceError> {
    let mut warnings = Vec::new();
    match request {
        DeviceRequest::Cuda(_) => return Err(DeviceError::CudaUnavailable(request.clone())),
        DeviceRequest::Auto => warnings.push("no usable CUDA backend in this build; running on the CPU".to_string()),
        DeviceRequest::Cpu => {}
    }
    let precision = if precision != Precision::F32 {
        warnings.push(format!("precision {precision} is not available on the CPU; using f32"));
        Precision::F32
    } else {
        precision
    };
    Ok(Resolved { device: "cpu", precision, warnings })
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
        let r = resolve(&DeviceRequest::Cpu, Precision::Fp16).unwrap();
        assert_eq!(r.precision, Precision::F32);
        assert_eq!(r.warnings.len(), 1);
    }
}
