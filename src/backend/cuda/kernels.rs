//! The CUDA C sources in `kernels/`, compiled by NVRTC for the GPU at hand
//! and cached on disk, so a restart loads PTX instead of compiling again.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::{CompileOptions, Ptx};

use super::error::CudaError;

const COMMON: &str = include_str!("../../../kernels/common.cuh");

/// Every kernel file, by name; each is compiled with `common.cuh` in front.
pub const SOURCES: &[(&str, &str)] = &[
    ("elementwise.cu", include_str!("../../../kernels/elementwise.cu")),
    ("layernorm.cu", include_str!("../../../kernels/layernorm.cu")),
    ("conv.cu", include_str!("../../../kernels/conv.cu")),
    ("resize.cu", include_str!("../../../kernels/resize.cu")),
    ("attention.cu", include_str!("../../../kernels/attention.cu")),
    ("attention_split.cu", include_str!("../../../kernels/attention_split.cu")),
    ("frame.cu", include_str!("../../../kernels/frame.cu")),
    ("decoder.cu", include_str!("../../../kernels/decoder.cu")),
    ("overlay.cu", include_str!("../../../kernels/overlay.cu")),
];

/// One translation unit: the shared header, then each file (with `#line` so
/// NVRTC's messages name the real file and line).
pub fn translation_unit(files: &[(&str, &str)]) -> String {
    let mut src = String::from(COMMON);
    for (name, body) in files {
        src.push_str(&format!("\n#line 1 \"{name}\"\n"));
        src.push_str(body);
    }
    src
}

/// NVRTC options: the exact architecture (so Hopper gets its own code) and
/// fast math: the kernels' exp/erf feed fp16 outputs, where the approximate
/// versions' error is far below the storage precision.
pub fn compile_options(arch: &'static str) -> CompileOptions {
    CompileOptions { arch: Some(arch), options: vec!["--use_fast_math".into(), "--std=c++17".into()], ..Default::default() }
}

/// `sm_XY` for a compute capability, as a static string NVRTC options need.
pub fn arch_name(major: i32, minor: i32) -> &'static str {
    match (major, minor) {
        (8, 0) => "sm_80",
        (8, 6) => "sm_86",
        (8, 7) => "sm_87",
        (8, 9) => "sm_89",
        (9, 0) => "sm_90",
        (10, 0) => "sm_100",
        (12, 0) => "sm_120",
        // Newer parts run sm_90 PTX through the driver's JIT.
        (m, _) if m >= 9 => "sm_90",
        _ => "sm_80",
    }
}

/// Compiles `src` for `arch`, with NVRTC's log in the error.
pub fn compile(src: &str, arch: &'static str) -> Result<Ptx, CudaError> {
    Ok(cudarc::nvrtc::compile_ptx_with_opts(src, compile_options(arch))?)
}

/// Where compiled PTX is kept: `$ROADSEG_KERNEL_CACHE`, else
/// `$XDG_CACHE_HOME/roadseg/kernels`, else `~/.cache/roadseg/kernels`.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("ROADSEG_KERNEL_CACHE") {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))?;
    Some(base.join("roadseg").join("kernels"))
}

/// The cache key: source, options, architecture, driver and NVRTC versions
/// (any of them changing can change the PTX or what the driver accepts).
fn cache_key(src: &str, arch: &'static str, driver: i32) -> String {
    let mut h = DefaultHasher::new();
    src.hash(&mut h);
    compile_options(arch).options.hash(&mut h);
    arch.hash(&mut h);
    driver.hash(&mut h);
    super::probe::nvrtc_version().hash(&mut h);
    format!("{:016x}-{arch}.ptx", h.finish())
}

/// PTX for every kernel on this GPU, from the disk cache when it is there.
fn ptx_for(arch: &'static str, driver: i32) -> Result<Ptx, CudaError> {
    let src = translation_unit(SOURCES);
    let cached = cache_dir().map(|d| d.join(cache_key(&src, arch, driver)));
    if let Some(path) = &cached {
        if let Ok(text) = std::fs::read_to_string(path) {
            tracing::debug!(path = %path.display(), "CUDA kernels loaded from cache");
            return Ok(Ptx::from_src(text));
        }
    }
    let start = std::time::Instant::now();
    let ptx = compile(&src, arch)?;
    tracing::info!(arch, ms = start.elapsed().as_millis() as u64, "CUDA kernels compiled with NVRTC");
    if let Some(path) = &cached {
        // A cache that cannot be written only costs the next start a compile.
        let write = path.parent().map(std::fs::create_dir_all).transpose().and_then(|_| {
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&tmp, ptx.to_src())?;
            std::fs::rename(&tmp, path)
        });
        if let Err(e) = write {
            tracing::warn!(path = %path.display(), "could not cache compiled CUDA kernels: {e}");
        }
    }
    Ok(ptx)
}

/// The loaded module of one GPU, shared by every worker on it.
pub struct KernelModule {
    module: Arc<CudaModule>,
}

impl KernelModule {
    pub fn load(ctx: &Arc<CudaContext>, arch: &'static str, driver: i32) -> Result<Self, CudaError> {
        let module = ctx.load_module(ptx_for(arch, driver)?)?;
        Ok(KernelModule { module })
    }

    pub fn function(&self, name: &str) -> Result<CudaFunction, CudaError> {
        self.module.load_function(name).map_err(|source| CudaError::MissingKernel { name: name.to_string(), source })
    }
}

/// Declares [`Ops`], one field per kernel, and the lookup that fills it, so
/// each kernel is named once: field `x` is kernel `x_<SUFFIX>`.
macro_rules! ops {
    ($($(#[doc = $doc:literal])* $op:ident,)+) => {
        /// The kernels one element type uses, resolved once per backend so a
        /// launch looks nothing up.
        pub struct Ops {
            $($(#[doc = $doc])* pub $op: CudaFunction,)+
            /// Tensor-core attention for head sizes 32 and 64 (16-bit types only).
            pub flash_hd32: Option<CudaFunction>,
            pub flash_hd64: Option<CudaFunction>,
            /// Split-KV flash attention (kernels/attention_split.cu) for head
            /// sizes 32 and 64 and the kernel that merges its splits (16-bit
            /// types, when `CudaOptions::split_attention` is on).
            pub flash_split_hd32: Option<CudaFunction>,
            pub flash_split_hd64: Option<CudaFunction>,
            pub flash_split_combine: Option<CudaFunction>,
            /// The overlay tint, on uint8 frames whatever the element type.
            pub annotate_frame: CudaFunction,
        }

        impl Ops {
            pub fn resolve(module: &KernelModule, suffix: &str, flash: bool, split: bool) -> Result<Self, CudaError> {
                let f = |op: &str| module.function(&format!("{op}_{suffix}"));
                let flash_fn = |hd: usize| if flash { f(&format!("flash_attention_hd{hd}")).map(Some) } else { Ok(None) };
                let split_fn = |name: &str| if flash && split { f(name).map(Some) } else { Ok(None) };
                Ok(Ops {
                    $($op: f(stringify!($op))?,)+
                    flash_hd32: flash_fn(32)?,
                    flash_hd64: flash_fn(64)?,
                    flash_split_hd32: split_fn("flash_split_hd32")?,
                    flash_split_hd64: split_fn("flash_split_hd64")?,
                    flash_split_combine: split_fn("flash_split_combine")?,
                    annotate_frame: module.function("annotate_frame")?,
                })
            }
        }
    };
}

ops! {
    add_assign,
    relu,
    from_f32,
    to_f32,
    layer_norm,
    /// Rows of whole 16-byte chunks, read once into registers: up to 1, 2 and 4 chunks per lane.
    layer_norm_vec1,
    layer_norm_vec2,
    layer_norm_vec4,
    im2col,
    /// 16 bytes per thread, for inputs whose channels are whole 16-byte chunks.
    im2col_vec,
    dwconv3x3_gelu,
    /// Vectorised, row-sliding form for channel counts divisible by 4.
    dwconv3x3_gelu_tiled,
    resize_bilinear,
    /// The decode head after the projections, fused (kernels/decoder.cu).
    decode_tail,
    attention_simple,
    preprocess,
    postprocess,
}
