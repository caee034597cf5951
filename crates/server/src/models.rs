//! [`Models`]: the named embedders a server answers for, each filled in once it has loaded.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use nornir_vector::Embedder;

/// A mistake in the set of models: a name given twice, an empty name, or a name the set does
/// not have.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModelsError {
    Empty,
    BadName(String),
    Duplicate(String),
    Unknown { name: String, known: Vec<String> },
    AlreadyLoaded(String),
}

impl std::fmt::Display for ModelsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Empty => write!(f, "no model to serve: give at least one"),
            Self::BadName(n) => write!(
                f,
                "model name {n:?} is not usable: use letters, digits and - _ . only, and not empty (an alias may also hold / and other printable characters, no spaces)"
            ),
            Self::Duplicate(n) => write!(f, "model name {n:?} is given twice: give each model its own name"),
            Self::Unknown { name, known } => {
                write!(f, "no model is named {name:?}; the models are {}", known.join(", "))
            }
            Self::AlreadyLoaded(n) => write!(f, "model {n:?} is already loaded"),
        }
    }
}

impl std::error::Error for ModelsError {}

/// One served model.
#[derive(Debug)]
pub(crate) struct Entry {
    /// The served name: the answer's `model`, the `/metrics` label.
    pub(crate) name: String,
    /// Other names a request may give for it.
    pub(crate) aliases: Vec<String>,
    pub(crate) embedder: OnceLock<Arc<Embedder>>,
    /// Texts and tokens embedded for requests, for `/metrics`.
    pub(crate) texts: AtomicU64,
    pub(crate) tokens: AtomicU64,
    /// Texts cut to the model's length.
    pub(crate) truncated: AtomicU64,
}

/// The models a server answers for, in order: the first is the one TEI's routes use without a
/// `/models/{name}` prefix and OpenAI's use without a `model` field. Names are set up front;
/// each embedder is filled in when it has loaded, so the server can listen (and `/health` say
/// "loading") meanwhile.
#[derive(Debug)]
pub struct Models {
    pub(crate) entries: Vec<Entry>,
}

/// A name a URL path and a Prometheus label can hold as it is.
fn usable_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// An alias is only ever compared with a request's `model`: a hub id (`BAAI/bge-small-en-v1.5`)
/// is one. No spaces, quotes or control characters.
fn usable_alias(alias: &str) -> bool {
    !alias.is_empty() && alias.chars().all(|c| c.is_ascii_graphic() && c != '"' || !c.is_ascii() && !c.is_control())
}

impl Models {
    /// The names of the models to serve, none loaded yet.
    pub fn new(names: impl IntoIterator<Item = String>) -> Result<Self, ModelsError> {
        Self::with_aliases(names.into_iter().map(|n| (n, Vec::new())))
    }

    /// The models to serve, each with its served name and the other names (aliases) a request
    /// may give for it (`--model NAME,ALIAS=DIR`). Every name and alias is unique.
    pub fn with_aliases(models: impl IntoIterator<Item = (String, Vec<String>)>) -> Result<Self, ModelsError> {
        let mut entries: Vec<Entry> = Vec::new();
        for (name, aliases) in models {
            let names: Vec<&String> = std::iter::once(&name).chain(&aliases).collect();
            for (i, n) in names.iter().enumerate() {
                if !(if i == 0 { usable_name(n) } else { usable_alias(n) }) {
                    return Err(ModelsError::BadName((*n).clone()));
                }
                let earlier = names[..i].contains(n);
                if earlier || entries.iter().any(|e| e.name == **n || e.aliases.contains(n)) {
                    return Err(ModelsError::Duplicate((*n).clone()));
                }
            }
            entries.push(Entry {
                name,
                aliases,
                embedder: OnceLock::new(),
                texts: AtomicU64::new(0),
                tokens: AtomicU64::new(0),
                truncated: AtomicU64::new(0),
            });
        }
        if entries.is_empty() {
            return Err(ModelsError::Empty);
        }
        Ok(Self { entries })
    }

    /// Model `name` has loaded: the server answers for it from now on.
    pub fn set_loaded(&self, name: &str, embedder: Arc<Embedder>) -> Result<(), ModelsError> {
        self.entry(name)?.embedder.set(embedder).map_err(|_| ModelsError::AlreadyLoaded(name.to_owned()))
    }

    /// The model names, in order.
    pub fn names(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.name.clone()).collect()
    }

    /// Every name a request may give: each model's name, then its aliases, in order.
    pub fn all_names(&self) -> Vec<String> {
        self.entries.iter().flat_map(|e| std::iter::once(&e.name).chain(&e.aliases).cloned()).collect()
    }

    /// Model `name`'s (or an alias's) embedder, once it has loaded.
    pub fn get(&self, name: &str) -> Option<&Arc<Embedder>> {
        self.find(name).and_then(|e| e.embedder.get())
    }

    fn find(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.name == name || e.aliases.iter().any(|a| a == name))
    }

    /// Whether every model has loaded.
    pub fn all_loaded(&self) -> bool {
        self.entries.iter().all(|e| e.embedder.get().is_some())
    }

    pub(crate) fn entry(&self, name: &str) -> Result<&Entry, ModelsError> {
        self.find(name).ok_or_else(|| ModelsError::Unknown { name: name.to_owned(), known: self.all_names() })
    }

    pub(crate) fn first(&self) -> &Entry {
        &self.entries[0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert_eq!(Models::new(Vec::new()).unwrap_err(), ModelsError::Empty);
        let twice = Models::new(["a".to_owned(), "a".to_owned()]).unwrap_err();
        assert!(twice.to_string().contains("twice"), "{twice}");
        for bad in ["", "a b", "a/b", "x\"y"] {
            assert!(matches!(Models::new([bad.to_owned()]), Err(ModelsError::BadName(_))), "{bad:?}");
        }
        let m = Models::new(["bge-small".to_owned(), "e5.int8".to_owned()]).expect("names");
        assert_eq!(m.names(), ["bge-small", "e5.int8"]);
        assert!(!m.all_loaded() && m.get("bge-small").is_none());
        let e = m.entry("gte").unwrap_err().to_string();
        assert!(e.contains("bge-small, e5.int8"), "{e}");
    }

    #[test]
    fn aliases_name_their_model_and_every_name_is_unique() {
        let m = Models::with_aliases([
            ("minilm".to_owned(), vec!["text-embedding-3-small".to_owned(), "ada".to_owned()]),
            ("para".to_owned(), Vec::new()),
        ])
        .expect("names");
        assert_eq!(m.all_names(), ["minilm", "text-embedding-3-small", "ada", "para"]);
        assert_eq!(m.entry("ada").expect("alias").name, "minilm");
        assert_eq!(m.entry("text-embedding-3-small").expect("alias").name, "minilm");
        assert!(m.entry("nope").unwrap_err().to_string().contains("minilm, text-embedding-3-small, ada, para"));
        for clash in [
            vec![("a".to_owned(), vec!["b".to_owned()]), ("b".to_owned(), Vec::new())],
            vec![("a".to_owned(), vec!["a".to_owned()])],
            vec![("a".to_owned(), vec!["x".to_owned(), "x".to_owned()])],
            vec![("a".to_owned(), Vec::new()), ("b".to_owned(), vec!["a".to_owned()])],
        ] {
            assert!(matches!(Models::with_aliases(clash.clone()), Err(ModelsError::Duplicate(_))), "{clash:?}");
        }
        assert!(matches!(
            Models::with_aliases([("a".to_owned(), vec!["b c".to_owned()])]),
            Err(ModelsError::BadName(_))
        ));
        let hub =
            Models::with_aliases([("bge".to_owned(), vec!["BAAI/bge-small-en-v1.5".to_owned()])]).expect("a hub id");
        assert_eq!(hub.entry("BAAI/bge-small-en-v1.5").expect("alias").name, "bge");
        assert!(
            matches!(Models::new(["BAAI/bge".to_owned()]), Err(ModelsError::BadName(_))),
            "a served name is a path"
        );
    }
}
