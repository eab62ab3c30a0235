//! Where the Hub is and where its files are kept, read from the same
//! environment variables `huggingface_hub` reads, so both tools share one
//! cache and one token.

use std::fmt;
use std::path::{Path, PathBuf};

pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// A Hub access token. Its Debug and Display never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    value: String,
    /// Where it came from, for messages: `$HF_TOKEN` or a file's path.
    pub source: String,
}

impl Token {
    pub(super) fn value(&self) -> &str {
        &self.value
    }

    #[cfg(test)]
    pub(super) fn for_tests(value: &str) -> Token {
        Token { value: value.into(), source: "$HF_TOKEN".into() }
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token(<redacted>, from {})", self.source)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubSettings {
    /// `$HF_ENDPOINT`, default https://huggingface.co (no trailing slash).
    pub endpoint: String,
    /// The hub cache: `$HF_HUB_CACHE`, `$HUGGINGFACE_HUB_CACHE`, else
    /// `$HF_HOME/hub`; `HF_HOME` defaults to `$XDG_CACHE_HOME/huggingface`,
    /// then `~/.cache/huggingface`. `None`: no variable and no home.
    pub cache: Option<PathBuf>,
    /// `$HF_TOKEN`, else the file `$HF_TOKEN_PATH` (default `$HF_HOME/token`,
    /// where `huggingface-cli login` writes it).
    pub token: Option<Token>,
    /// `$HF_HUB_OFFLINE` set to 1/true/yes/on: the cache only, no request.
    pub offline: bool,
}

impl HubSettings {
    pub fn from_env() -> HubSettings {
        HubSettings::from_vars(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
    }

    /// The rules of [`HubSettings`] over any variable lookup (tests pass a map).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> HubSettings {
        let hf_home = var("HF_HOME").map(PathBuf::from).or_else(|| {
            var("XDG_CACHE_HOME")
                .map(|x| Path::new(&x).join("huggingface"))
                .or_else(|| var("HOME").map(|h| Path::new(&h).join(".cache/huggingface")))
        });
        let cache = var("HF_HUB_CACHE")
            .or_else(|| var("HUGGINGFACE_HUB_CACHE"))
            .map(PathBuf::from)
            .or_else(|| hf_home.as_ref().map(|h| h.join("hub")));
        let token = var("HF_TOKEN")
            .map(|value| Token { value: value.trim().to_string(), source: "$HF_TOKEN".into() })
            .or_else(|| {
                let path = var("HF_TOKEN_PATH").map(PathBuf::from).or_else(|| hf_home.as_ref().map(|h| h.join("token")))?;
                let value = std::fs::read_to_string(&path).ok()?.trim().to_string();
                (!value.is_empty()).then(|| Token { value, source: path.display().to_string() })
            });
        let offline = var("HF_HUB_OFFLINE").is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"));
        let endpoint = var("HF_ENDPOINT").unwrap_or_else(|| DEFAULT_ENDPOINT.into()).trim_end_matches('/').to_string();
        HubSettings { endpoint, cache, token, offline }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> HubSettings {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        HubSettings::from_vars(|k| map.get(k).cloned())
    }

    #[test]
    fn the_cache_and_token_are_found_where_huggingface_hub_looks() {
        // Rule: HF_HUB_CACHE > HUGGINGFACE_HUB_CACHE > HF_HOME/hub > XDG_CACHE_HOME/huggingface/hub > ~/.cache/huggingface/hub; HF_TOKEN > token file.
        assert_eq!(settings(&[("HOME", "/home/u")]).cache, Some(PathBuf::from("/home/u/.cache/huggingface/hub")));
        assert_eq!(settings(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "/x")]).cache, Some(PathBuf::from("/x/huggingface/hub")));
        assert_eq!(settings(&[("HOME", "/home/u"), ("HF_HOME", "/h")]).cache, Some(PathBuf::from("/h/hub")));
        assert_eq!(settings(&[("HF_HOME", "/h"), ("HUGGINGFACE_HUB_CACHE", "/old")]).cache, Some(PathBuf::from("/old")));
        assert_eq!(settings(&[("HF_HOME", "/h"), ("HUGGINGFACE_HUB_CACHE", "/old"), ("HF_HUB_CACHE", "/c")]).cache, Some(PathBuf::from("/c")));
        assert_eq!(settings(&[]).cache, None);
        let s = settings(&[("HF_ENDPOINT", "http://127.0.0.1:9/"), ("HF_HUB_OFFLINE", "True")]);
        assert_eq!((s.endpoint.as_str(), s.offline), ("http://127.0.0.1:9", true));
        assert!(!settings(&[("HF_HUB_OFFLINE", "0")]).offline);
        assert_eq!(settings(&[]).endpoint, DEFAULT_ENDPOINT);

        let home = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join("token"), "hf_file\n").unwrap();
        let h = home.path().to_str().unwrap();
        let from_file = settings(&[("HF_HOME", h)]).token.unwrap();
        assert_eq!((from_file.value(), from_file.source.clone()), ("hf_file", home.path().join("token").display().to_string()));
        let from_env = settings(&[("HF_HOME", h), ("HF_TOKEN", "hf_env")]).token.unwrap();
        assert_eq!(from_env.value(), "hf_env");
        assert!(!format!("{from_env:?}").contains("hf_env"), "Debug must not show the token");
        assert_eq!(settings(&[("HF_HOME", h), ("HF_TOKEN_PATH", "/nonexistent")]).token, None);
    }
}
