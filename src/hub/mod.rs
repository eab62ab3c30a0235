//! Models by name from the Hugging Face Hub: `--model org/name[@revision]`
//! (or `[model] path`) fetched into the Hub's standard cache, the one
//! `transformers` uses, so a model either tool downloaded serves both.
//!
//! A branch or tag is resolved to a commit first and every file is fetched
//! at that commit, so `config.json` and the weights always match. Each
//! download is checked against the Hub's checksum before it enters the
//! cache. Without the network, a model already cached is used (with a
//! warning); with `HF_HUB_OFFLINE=1` no request is made at all.

mod cache;
mod client;
mod error;
mod id;
mod progress;
mod settings;

use std::fmt;
use std::path::{Path, PathBuf};

use cache::RepoCache;
use client::Client;
pub use error::{EXIT_CANT_CREATE, EXIT_CONFIG, EXIT_UNAVAILABLE, HubError};
pub use id::{DEFAULT_REVISION, HubModelId, is_commit};
pub use settings::{DEFAULT_ENDPOINT, HubSettings, Token};

use crate::checkpoint::BUNDLED_MODEL;

/// What a SegFormer checkpoint needs, in the order fetched: the small
/// config first, so a repo that is not a SegFormer costs no weights.
pub const FILES: [&str; 2] = ["config.json", "model.safetensors"];

/// Where `--model` / `[model] path` points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelSource {
    Folder(PathBuf),
    Hub(HubModelId),
}

/// A folder that exists (or the bundled default) is a folder, as in
/// `transformers`; otherwise a name shaped `org/name[@rev]` is a Hub repo.
/// `hf://org/name` is always the Hub.
pub fn model_source(path: &Path) -> ModelSource {
    let text = path.to_str().unwrap_or_default();
    let forced = text.starts_with("hf://");
    if !forced && (path == Path::new(BUNDLED_MODEL) || path.exists()) {
        return ModelSource::Folder(path.to_path_buf());
    }
    match HubModelId::parse(text) {
        Some(id) => ModelSource::Hub(id),
        None => ModelSource::Folder(path.to_path_buf()),
    }
}

/// How a Hub model was had, for the log and the status page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fetched {
    Downloaded,
    /// The Hub was asked and the cache already held that commit.
    UpToDate,
    /// A commit sha asked for and cached: no request needed.
    Pinned,
    /// `HF_HUB_OFFLINE`: the cache only.
    Offline,
    /// The Hub could not be reached; the cached commit was used.
    Unreachable,
}

/// A Hub model in the cache, ready to load from `dir`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubModel {
    pub repo: String,
    /// As asked (`main` when none was named).
    pub revision: String,
    pub commit: String,
    /// `snapshots/<commit>` in the cache.
    pub dir: PathBuf,
    pub fetched: Fetched,
}

impl fmt::Display for HubModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{} (commit {})", self.repo, self.revision, self.commit)
    }
}

/// Where the running model came from: shown by `check-config`, the log,
/// the status page and `/api/v1/streams`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelOrigin {
    Folder(PathBuf),
    Hub(HubModel),
}

impl ModelOrigin {
    pub fn dir(&self) -> &Path {
        match self {
            ModelOrigin::Folder(dir) => dir,
            ModelOrigin::Hub(m) => &m.dir,
        }
    }
}

impl fmt::Display for ModelOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelOrigin::Folder(dir) => write!(f, "folder {}", dir.display()),
            ModelOrigin::Hub(m) => write!(f, "Hugging Face Hub {m}, cached at {}", m.dir.display()),
        }
    }
}

/// `--model` as the engine commands take it: the bundled default searched
/// for, a folder taken as given, a Hub name fetched.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    NotFound(#[from] crate::checkpoint::ModelNotFound),
    /// Shown as itself and kept as the source, so callers find the
    /// [`HubError`] (and its exit code) in the error's chain.
    #[error("{0}")]
    Hub(#[source] HubError),
}

pub fn resolve_model(path: &Path) -> Result<ModelOrigin, ModelError> {
    match model_source(path) {
        ModelSource::Folder(dir) => Ok(ModelOrigin::Folder(crate::checkpoint::locate_model(&dir)?)),
        ModelSource::Hub(id) => fetch_logged(&id, &HubSettings::from_env()).map(ModelOrigin::Hub).map_err(ModelError::Hub),
    }
}

/// [`fetch`], saying in the log what was used.
pub fn fetch_logged(id: &HubModelId, settings: &HubSettings) -> Result<HubModel, HubError> {
    let m = fetch(id, settings)?;
    let how = match m.fetched {
        Fetched::Downloaded => "downloaded",
        Fetched::UpToDate => "cached, up to date with the Hub",
        Fetched::Pinned => "cached (a pinned commit)",
        Fetched::Offline => "cached (HF_HUB_OFFLINE)",
        Fetched::Unreachable => "cached (Hub unreachable)",
    };
    tracing::info!(repo = %m.repo, revision = %m.revision, commit = %m.commit, "model {m}: {how}, in {}", m.dir.display());
    Ok(m)
}

/// Fetches (or finds in the cache) `id`'s config and weights.
pub fn fetch(id: &HubModelId, settings: &HubSettings) -> Result<HubModel, HubError> {
    let cache_root = settings.cache.as_deref().ok_or(HubError::NoCacheFolder)?;
    let cache = RepoCache::new(cache_root, id);
    let revision = id.revision();
    let found = |commit: String, fetched| HubModel {
        repo: id.repo.clone(),
        revision: revision.to_string(),
        dir: cache.snapshot(&commit),
        commit,
        fetched,
    };
    let cached = || cache.commit_of(revision).filter(|c| cache.complete_snapshot(c, &FILES).is_some());
    if settings.offline {
        return match cached() {
            Some(commit) => Ok(found(commit, Fetched::Offline)),
            None => Err(not_cached(id, &cache, cache_root)),
        };
    }
    if is_commit(revision) && cached().is_some() {
        return Ok(found(revision.to_string(), Fetched::Pinned));
    }
    let client = Client::new(settings, id, cache_root);
    let config = match client.head(id, revision, FILES[0]) {
        Ok(meta) => meta,
        Err(e @ HubError::Unreachable { .. }) => {
            let Some(commit) = cached() else { return Err(e) };
            tracing::warn!("{e}; using the cached {id} at commit {commit}");
            return Ok(found(commit, Fetched::Unreachable));
        }
        Err(e) => return Err(e),
    };
    let commit = config.commit.clone();
    let cache_error = |err| HubError::Cache { path: cache_root.to_path_buf(), err };
    if !is_commit(revision) {
        cache.write_ref(revision, &commit).map_err(cache_error)?;
    }
    if cache.complete_snapshot(&commit, &FILES).is_some() {
        return Ok(found(commit, Fetched::UpToDate));
    }
    // Both answers before any download: a repo without safetensors costs nothing.
    let weights = client.head(id, &commit, FILES[1]).map_err(|e| match e {
        HubError::NoSafetensors { repo, .. } => HubError::NoSafetensors { model: format!("{}@{revision}", id.repo), repo },
        other => other,
    })?;
    let snapshot = cache.snapshot(&commit);
    ensure(&client, &cache, &commit, FILES[0], &config)?;
    check_is_segformer(&snapshot.join(FILES[0]), id)?;
    ensure(&client, &cache, &commit, FILES[1], &weights)?;
    Ok(found(commit, Fetched::Downloaded))
}

/// The file at `commit` in the cache: linked to its blob, downloaded first
/// when no blob with its checksum is there yet.
fn ensure(client: &Client<'_>, cache: &RepoCache, commit: &str, file: &str, meta: &client::FileMeta) -> Result<(), HubError> {
    let cache_error = |path: &Path| {
        let path = path.to_path_buf();
        move |err| HubError::Cache { path, err }
    };
    let blob = cache.blob(&meta.etag);
    if !blob.is_file() {
        let partial = cache.partial_blob(&meta.etag).map_err(cache_error(&blob))?;
        if let Err(e) = client.download(meta, file, &partial) {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
        std::fs::rename(&partial, &blob).map_err(cache_error(&blob))?;
    }
    cache.link(commit, file, &meta.etag).map_err(cache_error(&cache.snapshot(commit)))?;
    Ok(())
}

fn check_is_segformer(config: &Path, id: &HubModelId) -> Result<(), HubError> {
    let text = std::fs::read_to_string(config).map_err(|err| HubError::Cache { path: config.to_path_buf(), err })?;
    let model_type = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("model_type").and_then(|t| t.as_str()).map(str::to_string))
        .unwrap_or_else(|| "(none)".into());
    if model_type != "segformer" {
        return Err(HubError::NotSegformer { model: id.to_string(), model_type });
    }
    Ok(())
}

fn not_cached(id: &HubModelId, cache: &RepoCache, root: &Path) -> HubError {
    let revision = id.revision();
    let missing = match cache.commit_of(revision) {
        None if is_commit(revision) => "no snapshot of that commit".to_string(),
        None => format!("no refs/{revision}"),
        Some(commit) => format!("snapshot {commit} lacks {}", cache.missing(&commit, &FILES).join(" and ")),
    };
    HubError::NotCached { model: id.to_string(), cache: root.display().to_string(), missing }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn existing_folders_win_and_repo_shaped_names_go_to_the_hub() {
        // Rule: a folder that exists, or the bundled default, is a folder; else org/name[@rev] is the Hub; hf:// always is.
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("org");
        std::fs::create_dir_all(folder.join("name")).unwrap();
        assert_eq!(model_source(&folder.join("name")), ModelSource::Folder(folder.join("name")));
        assert_eq!(model_source(Path::new(BUNDLED_MODEL)), ModelSource::Folder(PathBuf::from(BUNDLED_MODEL)));
        assert_eq!(model_source(Path::new("nvidia/mit-b0")), ModelSource::Hub(HubModelId::parse("nvidia/mit-b0").unwrap()));
        assert_eq!(model_source(Path::new("/no/such/folder")), ModelSource::Folder(PathBuf::from("/no/such/folder")));
        assert_eq!(model_source(Path::new("hf://models/roadseg-camvid")), ModelSource::Hub(HubModelId::parse("models/roadseg-camvid").unwrap()));
    }

    #[test]
    fn offline_uses_a_complete_cached_snapshot_and_names_what_is_missing() {
        // Rule: HF_HUB_OFFLINE resolves refs/<rev> to a snapshot with config.json and model.safetensors, or says which part is absent.
        let dir = tempfile::tempdir().unwrap();
        let settings = HubSettings { endpoint: "http://127.0.0.1:1".into(), cache: Some(dir.path().into()), token: None, offline: true };
        let id = HubModelId::parse("org/name").unwrap();
        let e = fetch(&id, &settings).unwrap_err().to_string();
        assert!(e.contains("HF_HUB_OFFLINE") && e.contains("no refs/main") && e.contains(&dir.path().display().to_string()), "{e}");
        let cache = RepoCache::new(dir.path(), &id);
        let sha = "0123456789abcdef0123456789abcdef01234567";
        cache.write_ref("main", sha).unwrap();
        for (file, etag) in [("config.json", "c"), ("model.safetensors", "w")] {
            std::fs::create_dir_all(cache.blob(etag).parent().unwrap()).unwrap();
            std::fs::write(cache.blob(etag), file).unwrap();
            cache.link(sha, file, etag).unwrap();
            if file == "config.json" {
                let e = fetch(&id, &settings).unwrap_err();
                assert!(e.to_string().contains("lacks model.safetensors") && e.is_config(), "{e}");
            }
        }
        let m = fetch(&id, &settings).unwrap();
        assert_eq!((m.commit.as_str(), m.fetched, m.dir.clone()), (sha, Fetched::Offline, cache.snapshot(sha)));
        assert_eq!(m.to_string(), format!("org/name@main (commit {sha})"));
    }
}
