//! `org/name[@revision]`: a model named as `transformers` names it.

use std::fmt;

/// The revision used when none is named, as on the Hub.
pub const DEFAULT_REVISION: &str = "main";
/// Spelling that leaves no doubt the name is a Hub repo, not a folder.
const SCHEME: &str = "hf://";

/// A model repo on the Hub and the revision wanted: a branch, a tag or a
/// commit sha (`None`: `main`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubModelId {
    pub repo: String,
    pub revision: Option<String>,
}

impl HubModelId {
    /// `org/name`, `org/name@revision`, or either after `hf://`; `None`
    /// for anything else (a folder path, a bare name). The Hub's own rules
    /// for names: letters, digits, `-`, `_`, `.`; no `--` or `..`; neither
    /// `-` nor `.` at either end; at most 96 characters a part.
    pub fn parse(text: &str) -> Option<HubModelId> {
        let text = text.strip_prefix(SCHEME).unwrap_or(text);
        let (repo, revision) = match text.split_once('@') {
            Some((repo, rev)) => (repo, Some(rev)),
            None => (text, None),
        };
        let (org, name) = repo.split_once('/')?;
        if !valid_part(org) || !valid_part(name) {
            return None;
        }
        if let Some(rev) = revision {
            if !valid_revision(rev) {
                return None;
            }
        }
        Some(HubModelId { repo: repo.to_string(), revision: revision.map(str::to_string) })
    }

    pub fn revision(&self) -> &str {
        self.revision.as_deref().unwrap_or(DEFAULT_REVISION)
    }

    /// The repo's folder in the Hub cache, as `huggingface_hub` names it.
    pub fn cache_folder(&self) -> String {
        format!("models--{}", self.repo.replace('/', "--"))
    }
}

impl fmt::Display for HubModelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.repo, self.revision())
    }
}

/// A full commit sha: a revision that can never move.
pub fn is_commit(revision: &str) -> bool {
    revision.len() == 40 && revision.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn valid_part(part: &str) -> bool {
    !part.is_empty()
        && part.len() <= 96
        && part.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && !part.starts_with(['-', '.'])
        && !part.ends_with(['-', '.'])
        && !part.contains("--")
        && !part.contains("..")
}

/// Branch and tag names as git allows them, kept to what is safe as a
/// path under the cache's `refs/` (`refs/pr/1` included).
fn valid_revision(rev: &str) -> bool {
    !rev.is_empty()
        && rev.len() <= 256
        && rev.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
        && rev.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_names_parse_and_folder_paths_do_not() {
        // Rule: org/name[@rev] (optionally hf://) is a Hub model; paths that cannot be a repo id are not.
        let id = HubModelId::parse("nvidia/segformer-b5-finetuned-cityscapes-1024-1024").unwrap();
        assert_eq!((id.repo.as_str(), id.revision()), ("nvidia/segformer-b5-finetuned-cityscapes-1024-1024", "main"));
        assert_eq!(id.cache_folder(), "models--nvidia--segformer-b5-finetuned-cityscapes-1024-1024");
        let pinned = HubModelId::parse("hf://org/name@refs/pr/3").unwrap();
        assert_eq!((pinned.repo.as_str(), pinned.revision()), ("org/name", "refs/pr/3"));
        assert_eq!(pinned.to_string(), "org/name@refs/pr/3");
        for not_hub in ["/abs/model", "./models/x", "../x/y", "a/b/c", "name", "org/", "/name", "org/na me", "org/-x", "org/x.", "o--k/x", "org/x@", "org/x@../../etc", "org/x@/abs", "C:\\x/y"] {
            assert_eq!(HubModelId::parse(not_hub), None, "{not_hub}");
        }
        assert!(is_commit("0123456789abcdef0123456789abcdef01234567"));
        assert!(!is_commit("main") && !is_commit("0123456789ABCDEF0123456789abcdef01234567"));
    }
}
