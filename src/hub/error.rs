//! Why a Hub model could not be had, each case with what to do about it.

use std::path::PathBuf;

/// sysexits: a name or access that a restart cannot fix (systemd's
/// `RestartPreventExitStatus=78` stops the loop) ...
pub const EXIT_CONFIG: u8 = 78;
/// ... the Hub unreachable or a download broken: a later try may work ...
pub const EXIT_UNAVAILABLE: u8 = 69;
/// ... the cache folder cannot be written.
pub const EXIT_CANT_CREATE: u8 = 73;

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("no model repo '{repo}' on the Hugging Face Hub ({endpoint}): check the name (org/name, as on its Hub page){}",
        if *.token_sent { "" } else { "; if the repo is private, set HF_TOKEN to a token that can read it" })]
    RepoNotFound { repo: String, endpoint: String, token_sent: bool },
    #[error("{repo} has no revision '{revision}' on the Hub: name a branch, a tag or a commit sha after '@'")]
    RevisionNotFound { repo: String, revision: String },
    #[error("{repo} is gated: accept its conditions at {endpoint}/{repo} while logged in, then set HF_TOKEN to a token of that account{}",
        if *.token_sent { " (the token sent has no access to it yet)" } else { "" })]
    Gated { repo: String, endpoint: String, token_sent: bool },
    #[error("the Hub refused the token from {token_source} for {repo} (HTTP 401): it is expired, revoked or mistyped; make one at {endpoint}/settings/tokens")]
    TokenRefused { repo: String, endpoint: String, token_source: String },
    #[error("{model} has no config.json: it is not a transformers model repo")]
    NoConfig { model: String },
    #[error("{model} has no model.safetensors: roadseg reads safetensors weights only. Convert it once with transformers \
        (SegformerForSemanticSegmentation.from_pretrained(\"{repo}\").save_pretrained(\"DIR\")) and pass --model DIR")]
    NoSafetensors { model: String, repo: String },
    #[error("{model} is not a SegFormer: its config.json says model_type {model_type:?}; roadseg runs SegformerForSemanticSegmentation \
        checkpoints (e.g. nvidia/segformer-b0-finetuned-cityscapes-1024-1024)")]
    NotSegformer { model: String, model_type: String },
    #[error("cannot reach the Hugging Face Hub at {endpoint} ({reason}), and {model} is not in the cache at {cache}: check the network \
        and proxy (HTTPS_PROXY), or fetch it once where the Hub is reachable")]
    Unreachable { endpoint: String, reason: String, model: String, cache: String },
    #[error("the Hub answered HTTP {status} for {what}: a fault on its side or a rate limit; try again later")]
    Server { status: u16, what: String },
    #[error("downloading {file} of {model} failed: {reason}. Nothing was kept in the cache; run again to retry")]
    BrokenDownload { file: String, model: String, reason: String },
    #[error("HF_HUB_OFFLINE is set and {model} is not in the Hugging Face cache at {cache} ({missing}): fetch it once without \
        HF_HUB_OFFLINE, or point HF_HOME/HF_HUB_CACHE at a cache that has it")]
    NotCached { model: String, cache: String, missing: String },
    #[error("HF_ENDPOINT {endpoint} does not answer as a Hugging Face Hub (no X-Repo-Commit or ETag header): check HF_ENDPOINT")]
    NotAHub { endpoint: String },
    #[error("no Hugging Face cache folder: HOME is not set; set HF_HOME (or HF_HUB_CACHE) to a writable folder")]
    NoCacheFolder,
    #[error("cannot write the Hugging Face cache at {}: {err}; set HF_HOME (or HF_HUB_CACHE) to a writable folder", path.display())]
    Cache { path: PathBuf, #[source] err: std::io::Error },
}

impl HubError {
    /// The process exit status for this failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            HubError::Unreachable { .. } | HubError::Server { .. } | HubError::BrokenDownload { .. } => EXIT_UNAVAILABLE,
            HubError::Cache { .. } => EXIT_CANT_CREATE,
            _ => EXIT_CONFIG,
        }
    }

    /// A wrong name, access or model: the configuration must change.
    pub fn is_config(&self) -> bool {
        self.exit_code() == EXIT_CONFIG
    }
}
