//! Which kernel each op uses: the one place the GPU check's verdicts land.
//!
//! Every switch here changes how work is issued, not what is computed (each
//! alternative is tested against the other). `bench/gpu-check.sh kernels`
//! times each opt-in kernel against the default on B5 and B0
//! (docs/gpu-check.md); turning a winner on by default is one line in
//! [`CudaOptions::DEFAULT`]. The environment overrides any default for one
//! run (`ROADSEG_CUDA_SPLIT_ATTENTION=1`, `=0`, ...), which is how the check
//! times both sides with the same binary.

/// Switches that change how work is issued, not what is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaOptions {
    /// Record the forward into a CUDA graph and replay it (off: `--no-graph`,
    /// `ROADSEG_CUDA_NO_GRAPH=1`).
    pub graphs: bool,
    /// The tensor-core flash attention where it applies (off: the simple
    /// kernel, the reference it is checked against; `ROADSEG_CUDA_NO_FLASH=1`).
    pub flash_attention: bool,
    /// The decode head's tail as one kernel (kernels/decoder.cu);
    /// `ROADSEG_CUDA_FUSED_DECODER=0|1`.
    pub fused_decoder: bool,
    /// The split-KV flash attention (kernels/attention_split.cu) where the
    /// flash kernel applies; `ROADSEG_CUDA_SPLIT_ATTENTION=0|1`.
    pub split_attention: bool,
    /// Layer norm reading rows in 16-byte chunks held in registers (off: the
    /// scalar kernel); `ROADSEG_CUDA_LAYER_NORM=vec|naive`.
    pub vector_layer_norm: bool,
    /// im2col moving 16-byte chunks where the channels allow (off: one
    /// element per thread); `ROADSEG_CUDA_IM2COL=vec|naive`.
    pub vector_im2col: bool,
    /// The tiled depthwise 3x3 (off: one thread per output);
    /// `ROADSEG_CUDA_DWCONV=tiled|naive`.
    pub tiled_dwconv: bool,
    /// How a worker waits for its stream; `ROADSEG_CUDA_SYNC=block|spin|yield`.
    pub sync_wait: SyncWait,
}

/// How a host thread waits for the GPU (the primary context's scheduling
/// flag, set before the context is first used).
///
/// CUDA's default (`CU_CTX_SCHED_AUTO`) spins whenever the process has fewer
/// contexts than the machine has cores, which is always the case here: every
/// worker then burns a whole core for as long as its frame is on the GPU.
/// With many cameras on one GPU the host cores, not the GPU, ran out first
/// (docs/scaling.md, "Measured since"), so the daemon blocks by default: the
/// waiting thread sleeps on an interrupt and the decoders and encoders get
/// the core, at the cost of a wake-up (tens of microseconds) per wait.
/// TensorRT's `trtexec` makes the same choice (`--useSpinWait` to opt out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncWait {
    /// `CU_CTX_SCHED_BLOCKING_SYNC`: sleep until the GPU signals.
    Block,
    /// `CU_CTX_SCHED_SPIN`: poll; the lowest latency for one stream.
    Spin,
    /// `CU_CTX_SCHED_YIELD`: poll, yielding the core between polls.
    Yield,
}

impl SyncWait {
    /// The primary context's scheduling flag for this choice.
    pub fn context_flags(self) -> u32 {
        use cudarc::driver::sys::CUctx_flags;
        (match self {
            SyncWait::Block => CUctx_flags::CU_CTX_SCHED_BLOCKING_SYNC,
            SyncWait::Spin => CUctx_flags::CU_CTX_SCHED_SPIN,
            SyncWait::Yield => CUctx_flags::CU_CTX_SCHED_YIELD,
        }) as u32
    }

    /// The name `ROADSEG_CUDA_SYNC` takes and the log shows.
    pub fn name(self) -> &'static str {
        match self {
            SyncWait::Block => "block",
            SyncWait::Spin => "spin",
            SyncWait::Yield => "yield",
        }
    }

    fn parse(value: &str) -> Option<SyncWait> {
        let value = value.to_ascii_lowercase();
        let value = if value == "blocking" { "block" } else { value.as_str() };
        [SyncWait::Block, SyncWait::Spin, SyncWait::Yield].into_iter().find(|s| s.name() == value)
    }
}

impl std::fmt::Display for SyncWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl CudaOptions {
    /// The defaults: each kernel is on once a GPU has timed it against what
    /// it replaces (docs/gpu-check.md, call `kernels`). Split attention and
    /// the fused decode tail, first timed on an H100 on 2026-11-26 (fp16,
    /// 1024x1024, docs/benchmarks.md): both on, B5 10.72 -> 8.14 ms a frame
    /// (x0.76), B0 2.50 -> 2.21 ms (x0.88); the CUDA tests pass with them.
    pub const DEFAULT: CudaOptions = CudaOptions {
        graphs: true,
        flash_attention: true,
        fused_decoder: true,
        split_attention: true,
        vector_layer_norm: true,
        vector_im2col: true,
        tiled_dwconv: true,
        sync_wait: SyncWait::Block,
    };

    /// The defaults with the environment's overrides (see each field).
    pub fn from_env() -> CudaOptions {
        Self::with_overrides(|name| std::env::var(name).ok())
    }

    /// The defaults with overrides looked up by variable name.
    pub fn with_overrides(var: impl Fn(&str) -> Option<String>) -> CudaOptions {
        let d = Self::DEFAULT;
        let switch = |name: &str, on: &str, off: &str, default: bool| match var(name).as_deref().map(str::to_ascii_lowercase).as_deref() {
            Some(v) if v == on || v == "1" || v == "true" || v == "on" => true,
            Some(v) if v == off || v == "0" || v == "false" || v == "off" => false,
            _ => default,
        };
        CudaOptions {
            graphs: !switch("ROADSEG_CUDA_NO_GRAPH", "1", "0", !d.graphs),
            flash_attention: !switch("ROADSEG_CUDA_NO_FLASH", "1", "0", !d.flash_attention),
            fused_decoder: switch("ROADSEG_CUDA_FUSED_DECODER", "1", "0", d.fused_decoder),
            split_attention: switch("ROADSEG_CUDA_SPLIT_ATTENTION", "1", "0", d.split_attention),
            vector_layer_norm: switch("ROADSEG_CUDA_LAYER_NORM", "vec", "naive", d.vector_layer_norm),
            vector_im2col: switch("ROADSEG_CUDA_IM2COL", "vec", "naive", d.vector_im2col),
            tiled_dwconv: switch("ROADSEG_CUDA_DWCONV", "tiled", "naive", d.tiled_dwconv),
            sync_wait: match var("ROADSEG_CUDA_SYNC") {
                Some(v) => SyncWait::parse(&v).unwrap_or_else(|| {
                    tracing::warn!(value = %v, default = %d.sync_wait, "ROADSEG_CUDA_SYNC is not block, spin or yield: keeping the default");
                    d.sync_wait
                }),
                None => d.sync_wait,
            },
        }
    }
}

impl Default for CudaOptions {
    fn default() -> Self {
        Self::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::{CudaOptions, SyncWait};

    #[test]
    fn the_environment_turns_each_kernel_on_and_off() {
        let with = |pairs: &'static [(&'static str, &'static str)]| {
            CudaOptions::with_overrides(move |name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string()))
        };
        assert_eq!(with(&[]), CudaOptions::DEFAULT);
        let all_on = with(&[("ROADSEG_CUDA_SPLIT_ATTENTION", "1"), ("ROADSEG_CUDA_FUSED_DECODER", "true"), ("ROADSEG_CUDA_LAYER_NORM", "vec")]);
        assert!(all_on.split_attention && all_on.fused_decoder && all_on.vector_layer_norm);
        let naive = with(&[("ROADSEG_CUDA_LAYER_NORM", "naive"), ("ROADSEG_CUDA_IM2COL", "naive"), ("ROADSEG_CUDA_DWCONV", "naive"), ("ROADSEG_CUDA_NO_GRAPH", "1")]);
        assert!(!naive.vector_layer_norm && !naive.vector_im2col && !naive.tiled_dwconv && !naive.graphs);
        let off = with(&[("ROADSEG_CUDA_SPLIT_ATTENTION", "0"), ("ROADSEG_CUDA_NO_FLASH", "0")]);
        assert!(!off.split_attention && off.flash_attention);
        assert_eq!(with(&[("ROADSEG_CUDA_FUSED_DECODER", "maybe")]).fused_decoder, CudaOptions::DEFAULT.fused_decoder, "an unknown value keeps the default");
    }

    #[test]
    fn workers_sleep_while_the_gpu_works_unless_told_to_spin() {
        let sync = |v: &'static str| CudaOptions::with_overrides(move |name| (name == "ROADSEG_CUDA_SYNC").then(|| v.to_string())).sync_wait;
        assert_eq!(CudaOptions::DEFAULT.sync_wait, SyncWait::Block);
        assert_eq!(sync("spin"), SyncWait::Spin);
        assert_eq!(sync("YIELD"), SyncWait::Yield);
        assert_eq!(sync("blocking"), SyncWait::Block);
        assert_eq!(sync("sometimes"), SyncWait::Block, "an unknown value keeps the default");
        // CUDA's CU_CTX_SCHED_* values: the flag word the driver gets.
        assert_eq!([SyncWait::Spin, SyncWait::Yield, SyncWait::Block].map(SyncWait::context_flags), [1, 2, 4]);
    }
}
