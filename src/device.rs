//! Choosing where inference runs: `cpu`, `cuda` or `auto`, and what precision
//! that device can honour.

use std::fmt;
use std::str::FromStr;

use crate::backend::Precision;

#[derive(Clone, Debug, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(try_from = "DeviceValue", into = "String")]
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
    #[error("'{0}' in a device list is not a GPU (list GPUs as \"cuda:N\" or N, e.g. [\"cuda:0\", \"cuda:1\"])")]
    NotAGpu(String),
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

/// `model.device` as written in a config: one string (`"cuda:0,1"`) or a
/// list of GPUs (`["cuda:0", "cuda:2"]`, `[0, 2]`).
#[derive(serde::Deserialize)]
#[serde(untagged)]
pub enum DeviceValue {
    One(String),
    List(Vec<GpuItem>),
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
pub enum GpuItem {
    Ordinal(usize),
    Name(String),
}

impl TryFrom<DeviceValue> for DeviceRequest {
    type Error = DeviceParseError;
    fn try_from(v: DeviceValue) -> Result<Self, DeviceParseError> {
        let items = match v {
            DeviceValue::One(s) => return s.parse(),
            DeviceValue::List(items) => items,
        };
        let mut ids = Vec::with_capacity(items.len());
        for item in items {
            match item {
                GpuItem::Ordinal(n) => ids.push(n),
                GpuItem::Name(name) => match name.parse()? {
                    DeviceRequest::Cuda(more) if !more.is_empty() => ids.extend(more),
                    _ => return Err(DeviceParseError::NotAGpu(name)),
                },
            }
        }
        if ids.is_empty() {
            return Err(DeviceParseError::NotAGpu("[]".into()));
        }
        Ok(DeviceRequest::Cuda(ids))
    }
}

/// Which of `gpus` GPUs each of `workers` workers runs on: worker `i` on GPU
/// `i % gpus`, so consecutive workers (the ones that take frames first) land
/// on different GPUs and every GPU gets within one worker of the same share.
/// Each worker then has its own engine, CUDA stream and graphs on that GPU.
pub fn plan_workers(workers: usize, gpus: usize) -> Vec<usize> {
    (0..workers).map(|i| i % gpus.max(1)).collect()
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

impl DeviceError {
    /// The device asked for.
    pub fn request(&self) -> &DeviceRequest {
        match self {
            DeviceError::NotBuilt(r) => r,
            #[cfg(feature = "cuda")]
            DeviceError::CudaUnavailable { request, .. } => request,
        }
    }

    /// Why it cannot be used, without naming a command-line flag (the
    /// daemon's messages name `model.device` instead).
    pub fn reason(&self) -> String {
        match self {
            DeviceError::NotBuilt(_) => "this roadseg was built without the `cuda` feature".to_string(),
            #[cfg(feature = "cuda")]
            DeviceError::CudaUnavailable { reason, .. } => reason.to_string(),
        }
    }
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
    /// The GPUs' CUDA ordinals, in the order workers are spread over them
    /// ([`plan_workers`]); empty on the CPU.
    pub gpus: Vec<usize>,
    pub precision: Precision,
    /// Human-readable reasons the request was not honoured as asked.
    pub warnings: Vec<String>,
}

impl Resolved {
    pub fn is_cpu(&self) -> bool {
        matches!(self.target, Target::Cpu)
    }

    /// The device each of `workers` workers runs on, as metrics label it:
    /// `cpu`, or `cuda:N` of its own GPU.
    pub fn worker_devices(&self, workers: usize) -> Vec<String> {
        if self.gpus.is_empty() {
            return vec![self.device.clone(); workers];
        }
        plan_workers(workers, self.gpus.len()).into_iter().map(|g| format!("cuda:{}", self.gpus[g])).collect()
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
    Ok(Resolved { target: Target::Cpu, device: "cpu".to_string(), gpus: Vec::new(), precision, warnings })
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
        gpus: gpus.iter().map(|g| g.ordinal).collect(),
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
    fn a_config_names_gpus_as_a_string_or_a_list() {
        #[derive(serde::Deserialize)]
        struct M {
            device: DeviceRequest,
        }
        // The same serde data model as the TOML config (JSON needs no feature).
        let parse = |value: &str| serde_json::from_str::<M>(&format!(r#"{{"device": {value}}}"#)).map(|m| m.device);
        assert_eq!(parse(r#""cuda:1""#).unwrap(), DeviceRequest::Cuda(vec![1]));
        assert_eq!(parse(r#""auto""#).unwrap(), DeviceRequest::Auto);
        assert_eq!(parse(r#"["cuda:0", "cuda:2"]"#).unwrap(), DeviceRequest::Cuda(vec![0, 2]));
        assert_eq!(parse("[1, 3]").unwrap(), DeviceRequest::Cuda(vec![1, 3]));
        assert_eq!(parse(r#"["cuda:0,1", 3]"#).unwrap(), DeviceRequest::Cuda(vec![0, 1, 3]));
        for bad in [r#"["cpu"]"#, "[]", r#"["cuda"]"#, r#"["gpu:x"]"#] {
            assert!(parse(bad).is_err(), "{bad} should not parse");
        }
    }

    #[test]
    fn workers_are_spread_round_robin_over_the_gpus() {
        assert_eq!(plan_workers(5, 2), [0, 1, 0, 1, 0]);
        assert_eq!(plan_workers(3, 4), [0, 1, 2], "more GPUs than workers: the first ones");
        assert_eq!(plan_workers(2, 0), [0, 0]);
        for (workers, gpus) in [(1, 1), (7, 3), (16, 8), (8, 3)] {
            let plan = plan_workers(workers, gpus);
            let per: Vec<usize> = (0..gpus).map(|g| plan.iter().filter(|&&p| p == g).count()).collect();
            assert!(per.iter().max().unwrap() - per.iter().min().unwrap() <= 1, "{workers} workers on {gpus} GPUs: {per:?}");
        }
        let two = Resolved { target: Target::Cpu, device: "cuda:1,3".into(), gpus: vec![1, 3], precision: Precision::Fp16, warnings: vec![] };
        assert_eq!(two.worker_devices(3), ["cuda:1", "cuda:3", "cuda:1"]);
        let cpu = resolve(&DeviceRequest::Cpu, None).unwrap();
        assert_eq!(cpu.worker_devices(2), ["cpu", "cpu"]);
    }

    #[test]
    fn no_code_path_hard_codes_gpu_zero() {
        // Rule: every CUDA code path takes the GPU's ordinal from the plan; none names device 0 (tests aside).
        fn sources(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    sources(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    out.push(path);
                }
            }
        }
        let mut files = Vec::new();
        sources(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
        assert!(files.len() > 50, "found the sources");
        let patterns = ["CudaContext::new(0)", "\"cuda:0\"", "ordinal: 0", "gpus[0]", "GpuMetrics::new(\"cuda:0", "cuDeviceGet(0"];
        let mut found = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for (n, line) in code.lines().enumerate() {
                let line = line.split("//").next().unwrap_or_default();
                for p in patterns.iter().filter(|p| line.contains(*p)) {
                    found.push(format!("{}:{}: {p}", file.display(), n + 1));
                }
            }
        }
        // first_gpu(): the first *usable* GPU of the probe, for the GPU tests.
        found.retain(|f| !f.contains("backend/cuda/device.rs") || !f.ends_with("gpus[0]"));
        assert!(found.is_empty(), "hard-coded GPU 0: {found:#?}");
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
