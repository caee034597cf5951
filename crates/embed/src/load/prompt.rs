//! Which text goes before every input, and which task a task-adapter model runs: from the
//! options and the folder's `config_sentence_transformers.json` and `config.json`.

use crate::error::EmbedError;
use crate::values::{ModelFolder, PromptChoice};
use nornir_options::EmbedderOptions;
use nornir_options::Prompt;

fn names<'a>(it: impl Iterator<Item = &'a String>) -> String {
    it.map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
}

/// The text of the folder's prompt `name`, or an error that lists the prompts there are.
pub(crate) fn named_prompt<'a>(folder: &'a ModelFolder, name: &str) -> Result<&'a str, EmbedError> {
    let prompts = &folder.prompts.prompts;
    match prompts.get(name) {
        Some(text) => Ok(text),
        None if prompts.is_empty() => Err(EmbedError::invalid(
            "prompt_name",
            format!("unknown prompt name {name:?}: the model has no prompts (config_sentence_transformers.json)"),
        )),
        None => Err(EmbedError::invalid(
            "prompt_name",
            format!("unknown prompt name {name:?}: the model's prompts are {}", names(prompts.keys())),
        )),
    }
}

/// Resolves the prompt and task, as sentence-transformers does: an explicit prompt, else the
/// named prompt, else the task's instruction, else the folder's default prompt.
pub(crate) fn choose_prompt(folder: &ModelFolder, o: &EmbedderOptions) -> Result<PromptChoice, EmbedError> {
    let task = match (&folder.tasks, &o.task) {
        (Some(tasks), Some(t)) => match tasks.iter().position(|x| x == t) {
            Some(i) => Some((t.clone(), i as i64)),
            None => {
                return Err(EmbedError::invalid(
                    "task",
                    format!("unknown task {t:?}: the model's tasks are {}", names(tasks.iter())),
                ));
            }
        },
        (Some(tasks), None) => {
            return Err(EmbedError::invalid(
                "task",
                format!(
                    "the model has task adapters (config.json's lora_adaptations); choose one of: {}",
                    names(tasks.iter())
                ),
            ));
        }
        (None, Some(t)) => {
            return Err(EmbedError::invalid(
                "task",
                format!("{t:?}: the model has no tasks (config.json has no lora_adaptations)"),
            ));
        }
        (None, None) => None,
    };
    let prompts = &folder.prompts.prompts;
    let named = |name: &str, source: String| -> Result<(String, Option<String>), EmbedError> {
        Ok((named_prompt(folder, name)?.to_owned(), Some(source)))
    };
    let (text, source) = if let Some(Prompt::Text(p)) = &o.call.prompt {
        (p.clone(), Some("the prompt option".to_owned()))
    } else if let Some(Prompt::Name(name)) = &o.call.prompt {
        named(name, format!("prompt {name:?}"))?
    } else if let Some((t, _)) = &task {
        let text = folder.task_instructions.get(t).or_else(|| prompts.get(t)).cloned().unwrap_or_default();
        (text, Some(format!("task {t:?}")))
    } else if let Some(name) = &folder.prompts.default_prompt_name {
        named(name, format!("default prompt {name:?}"))?
    } else {
        (String::new(), None)
    };
    let source = source.filter(|_| !text.is_empty());
    Ok(PromptChoice { text, source, task })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::load::model::parse_prompts;
    use nornir_options::CallOptions;

    fn folder(prompts: &str, tasks: Option<&[&str]>) -> ModelFolder {
        let t = tempfile::tempdir().expect("tempdir");
        std::fs::write(t.path().join("model.onnx"), b"x").expect("model");
        std::fs::write(t.path().join("tokenizer.json"), b"{}").expect("tokenizer");
        let mut f = ModelFolder::open(t.path(), None).expect("folder");
        f.prompts = parse_prompts(prompts).expect("prompts");
        f.tasks = tasks.map(|t| t.iter().map(|s| (*s).to_owned()).collect());
        f.task_instructions = BTreeMap::from([("retrieval.query".to_owned(), "Represent the query: ".to_owned())]);
        f
    }

    #[test]
    fn prompts_and_their_order() {
        let f =
            folder(r#"{"prompts":{"query":"query: ","passage":"passage: "},"default_prompt_name":"passage"}"#, None);
        let o = EmbedderOptions::default();
        let c = choose_prompt(&f, &o).expect("default");
        assert_eq!((c.text.as_str(), c.source.as_deref()), ("passage: ", Some("default prompt \"passage\"")));
        let c = choose_prompt(&f, &o.clone().with_call(CallOptions::new().with_prompt_name("query"))).expect("named");
        assert_eq!(c.text, "query: ");
        let c = choose_prompt(&f, &o.clone().with_call(CallOptions::new().with_prompt("Q: "))).expect("text");
        assert_eq!(c.text, "Q: ");
        let c = choose_prompt(&f, &o.clone().with_call(CallOptions::new().with_prompt("")))
            .expect("empty prompt turns the default off");
        assert_eq!((c.text.as_str(), c.source), ("", None));
        let e = choose_prompt(&f, &o.clone().with_call(CallOptions::new().with_prompt_name("search")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"passage\", \"query\""), "{e}");
        // One prompt: the builder called last decides.
        let c = choose_prompt(&f, &o.clone().with_call(CallOptions::new().with_prompt("a").with_prompt_name("query")))
            .expect("named");
        assert_eq!(c.text, "query: ");
        let e = choose_prompt(&folder("{}", None), &o.with_call(CallOptions::new().with_prompt_name("query")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no prompts"), "{e}");
    }

    #[test]
    fn tasks() {
        let f = folder("{}", Some(&["retrieval.query", "text-matching"]));
        let o = EmbedderOptions::default();
        let e = choose_prompt(&f, &o).unwrap_err().to_string();
        assert!(e.contains("`task`") && e.contains("\"text-matching\""), "{e}");
        let c = choose_prompt(&f, &o.clone().with_task("retrieval.query")).expect("task");
        assert_eq!((c.text.as_str(), c.task), ("Represent the query: ", Some(("retrieval.query".to_owned(), 0))));
        let c = choose_prompt(&f, &o.clone().with_task("text-matching")).expect("task without instruction");
        assert_eq!((c.text.as_str(), c.task), ("", Some(("text-matching".to_owned(), 1))));
        assert!(choose_prompt(&f, &o.clone().with_task("summarize")).unwrap_err().to_string().contains("unknown task"));
        let e = choose_prompt(&folder("{}", None), &o.with_task("retrieval.query")).unwrap_err().to_string();
        assert!(e.contains("no tasks"), "{e}");
    }
}
