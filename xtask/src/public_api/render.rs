//! The public API as lines, from rustdoc's JSON: every public item reachable from a crate's root
//! under the path a user names it by, one line per item with its signature (a function's
//! parameters and return type, a field's type, a variant's fields, a constant's type, a trait's
//! methods), one line per implemented trait, re-exports resolved to what they name, in the crate
//! that defines it.
//!
//! Written against rustdoc JSON `format_version` [`FORMAT_VERSION`]; another version is refused
//! with a message, since its shape may differ.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Result, bail};
use serde_json::Value;

use super::signature::{associated, bounds, function, generics, resolved, ty};

/// The rustdoc JSON format this reader was written for.
pub const FORMAT_VERSION: u64 = 57;

/// Every crate's JSON, by crate name (`nornir_embed`).
pub struct Docs {
    pub crates: BTreeMap<String, Value>,
}

/// Where an item is read: the crate's JSON it belongs to.
#[derive(Clone, Copy)]
struct In<'a> {
    json: &'a Value,
}

impl<'a> In<'a> {
    fn item(&self, id: &Value) -> Option<&'a Value> {
        self.json["index"].get(id_key(id))
    }
}

fn id_key(id: &Value) -> String {
    match id {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Docs {
    /// Checks each crate's format version.
    pub fn new(crates: BTreeMap<String, Value>) -> Result<Self> {
        for (name, json) in &crates {
            let version = json["format_version"].as_u64().unwrap_or(0);
            if version != FORMAT_VERSION {
                bail!(
                    "{name}: rustdoc JSON format_version {version}, but xtask/src/public_api/render.rs reads {FORMAT_VERSION}: the toolchain pin moved: update the reader to the new format"
                );
            }
        }
        Ok(Docs { crates })
    }

    /// The lines of `krate`'s public API. Re-exports of the crates in `separate` (listed on their
    /// own) are one line each.
    pub fn lines(&self, krate: &str, separate: &[&str]) -> Result<BTreeSet<String>> {
        let Some(json) = self.crates.get(krate) else { bail!("no rustdoc JSON for {krate}") };
        let here = In { json };
        let root = here.item(&json["root"]).ok_or_else(|| anyhow::anyhow!("{krate}: no root module"))?;
        let mut w = Walk { docs: self, separate, out: BTreeSet::new(), seen: BTreeSet::new() };
        w.module(here, root, krate);
        Ok(w.out)
    }

    /// The item a re-export of another crate's item names, in that crate's JSON: by the path
    /// rustdoc gives, else by name and kind (the defining path may run through private modules).
    fn external(&self, from: In<'_>, id: &Value) -> Option<(In<'_>, &Value)> {
        let summary = from.json["paths"].get(id_key(id))?;
        let path: Vec<&str> = summary["path"].as_array()?.iter().filter_map(Value::as_str).collect();
        let json = self.crates.get(*path.first()?)?;
        let there = In { json };
        let kind = summary["kind"].as_str().unwrap_or_default();
        let paths = json["paths"].as_object()?;
        let local = |s: &&Value| s["crate_id"].as_u64() == Some(0) && s["kind"].as_str() == Some(kind);
        let exact = paths.iter().find(|(_, s)| local(s) && s["path"].as_array().is_some_and(|p| *p == path));
        let by_name = || {
            let name = path.last()?;
            let mut found = json["index"].as_object()?.values().filter(|i| {
                i["crate_id"].as_u64() == Some(0)
                    && i["name"].as_str() == Some(name)
                    && paths.get(&id_key(&i["id"])).is_some_and(|s| local(&s))
            });
            let first = found.next()?;
            // Two items of one name and kind: the one in the module the path names.
            match found.next() {
                None => Some(first),
                Some(second) => [first, second].into_iter().find(|i| {
                    let file = i["span"]["filename"].as_str().unwrap_or_default();
                    path.len() > 2 && file.contains(path[path.len() - 2])
                }),
            }
        };
        let item = match exact {
            Some((k, _)) => json["index"].get(k)?,
            None => by_name()?,
        };
        Some((there, item))
    }
}

struct Walk<'d> {
    docs: &'d Docs,
    separate: &'d [&'d str],
    out: BTreeSet<String>,
    /// `(path, item id, crate)` already listed, against loops through glob re-exports.
    seen: BTreeSet<(String, String, usize)>,
}

impl<'d> Walk<'d> {
    fn module(&mut self, at: In<'d>, module: &'d Value, path: &str) {
        for id in module["inner"]["module"]["items"].as_array().into_iter().flatten() {
            if let Some(item) = at.item(id) {
                self.item(at, item, path, None);
            }
        }
    }

    /// One item found in the module at `parent`, under its own name or the one a re-export gives.
    fn item(&mut self, at: In<'d>, item: &'d Value, parent: &str, rename: Option<&str>) {
        if item["visibility"] != "public" {
            return;
        }
        let inner = &item["inner"];
        let Some((kind, body)) = inner.as_object().and_then(|o| o.iter().next()) else { return };
        if kind == "use" {
            return self.reexport(at, body, parent);
        }
        let name = rename.or(item["name"].as_str()).unwrap_or("_");
        let path = format!("{parent}::{name}");
        let key = (path.clone(), id_key(&item["id"]), std::ptr::from_ref(at.json) as usize);
        if !self.seen.insert(key) {
            return;
        }
        let generics = generics(&body["generics"]);
        let line = match kind.as_str() {
            "module" => {
                self.out.insert(format!("pub mod {path}"));
                return self.module(at, item, &path);
            }
            "function" => format!("pub {}", function(&path, body)),
            "struct" => {
                self.strukt(at, &path, body, non_exhaustive(item));
                self.impls(at, &path, body);
                return;
            }
            "enum" => {
                self.enumeration(at, &path, body, non_exhaustive(item));
                self.impls(at, &path, body);
                return;
            }
            "union" => {
                self.out.insert(format!("pub union {path}{generics}"));
                self.fields(at, &path, &body["fields"]);
                self.impls(at, &path, body);
                return;
            }
            "trait" => return self.trait_(at, &path, body),
            "constant" => format!("pub const {path}: {}", ty(&body["type"])),
            "static" => format!(
                "pub static {}{path}: {}",
                if body["is_mutable"] == true { "mut " } else { "" },
                ty(&body["type"])
            ),
            "type_alias" => format!("pub type {path}{generics} = {}", ty(&body["type"])),
            "macro" => format!("pub macro {path}!"),
            "proc_macro" => format!("pub proc_macro {path} ({})", body["kind"].as_str().unwrap_or("?")),
            "trait_alias" => format!("pub trait {path}{generics} = {}", bounds(&body["params"])),
            other => format!("pub {other} {path}"),
        };
        self.out.insert(line);
    }

    fn reexport(&mut self, at: In<'d>, body: &Value, parent: &str) {
        let name = body["name"].as_str().unwrap_or("_");
        let source = body["source"].as_str().unwrap_or("?");
        let id = &body["id"];
        let local = if id.is_null() { None } else { at.item(id) };
        let (there, target) = match local {
            Some(t) => (at, t),
            None => match (!id.is_null()).then(|| self.docs.external(at, id)).flatten() {
                Some(found) => found,
                None => {
                    let glob = if body["is_glob"] == true { "::*" } else { "" };
                    let line = if glob.is_empty() {
                        format!("pub use {parent}::{name} = {source}")
                    } else {
                        format!("pub use {parent}::{source}{glob}")
                    };
                    self.out.insert(line);
                    return;
                }
            },
        };
        if body["is_glob"] == true {
            return self.module(there, target, parent);
        }
        let is_crate = target["inner"]["module"]["is_crate"] == true;
        let crate_name = target["name"].as_str().unwrap_or_default();
        if is_crate && self.separate.contains(&crate_name) {
            self.out.insert(format!("pub use {parent}::{name} = {crate_name} (listed on its own)"));
            return;
        }
        self.item(there, target, parent, Some(name));
    }

    fn strukt(&mut self, at: In<'d>, path: &str, body: &Value, marker: &str) {
        let g = format!("{}{marker}", generics(&body["generics"]));
        match &body["kind"] {
            Value::String(unit) if unit == "unit" => {
                self.out.insert(format!("pub struct {path}{g};"));
            }
            Value::Object(k) if k.contains_key("tuple") => {
                let fields: Vec<String> = k["tuple"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|f| match at.item(f) {
                        Some(field) => format!("pub {}", ty(&field["inner"]["struct_field"])),
                        None => "_".to_owned(),
                    })
                    .collect();
                self.out.insert(format!("pub struct {path}{g}({});", fields.join(", ")));
            }
            Value::Object(k) => {
                let plain = &k["plain"];
                let stripped = if plain["has_stripped_fields"] == true { " (and private fields)" } else { "" };
                self.out.insert(format!("pub struct {path}{g}{stripped}"));
                self.fields(at, path, &plain["fields"]);
            }
            other => {
                self.out.insert(format!("pub struct {path}{g} {other}"));
            }
        }
    }

    fn fields(&mut self, at: In<'d>, path: &str, fields: &Value) {
        for f in fields.as_array().into_iter().flatten() {
            if let Some(field) = at.item(f).filter(|f| f["visibility"] == "public") {
                let name = field["name"].as_str().unwrap_or("_");
                self.out.insert(format!("pub {path}.{name}: {}", ty(&field["inner"]["struct_field"])));
            }
        }
    }

    fn enumeration(&mut self, at: In<'d>, path: &str, body: &Value, marker: &str) {
        let stripped = if body["has_stripped_variants"] == true { " (and hidden variants)" } else { "" };
        self.out.insert(format!("pub enum {path}{}{marker}{stripped}", generics(&body["generics"])));
        for v in body["variants"].as_array().into_iter().flatten() {
            let Some(variant) = at.item(v) else { continue };
            let name = variant["name"].as_str().unwrap_or("_");
            let kind = &variant["inner"]["variant"]["kind"];
            let field_type = |f: &Value| at.item(f).map_or("_".to_owned(), |f| ty(&f["inner"]["struct_field"]));
            let shape = match kind {
                Value::Object(k) if k.contains_key("tuple") => {
                    let types: Vec<String> = k["tuple"].as_array().into_iter().flatten().map(field_type).collect();
                    format!("({})", types.join(", "))
                }
                Value::Object(k) if k.contains_key("struct") => {
                    let fields: Vec<String> = k["struct"]["fields"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|f| at.item(f))
                        .map(|f| format!("{}: {}", f["name"].as_str().unwrap_or("_"), ty(&f["inner"]["struct_field"])))
                        .collect();
                    format!(" {{ {} }}", fields.join(", "))
                }
                _ => String::new(),
            };
            self.out.insert(format!("pub {path}::{name}{shape}{}", non_exhaustive(variant)));
        }
    }

    fn trait_(&mut self, at: In<'d>, path: &str, body: &Value) {
        let unsafe_ = if body["is_unsafe"] == true { "unsafe " } else { "" };
        let supertraits = bounds(&body["bounds"]);
        let colon = if supertraits.is_empty() { String::new() } else { format!(": {supertraits}") };
        self.out.insert(format!("pub {unsafe_}trait {path}{}{colon}", generics(&body["generics"])));
        for id in body["items"].as_array().into_iter().flatten() {
            if let Some(item) = at.item(id) {
                self.out.insert(format!("pub {}", associated(item, path)));
            }
        }
    }

    /// A type's inherent items, and one line per trait it implements (not auto or blanket ones).
    fn impls(&mut self, at: In<'d>, path: &str, body: &Value) {
        for id in body["impls"].as_array().into_iter().flatten() {
            let Some(imp) = at.item(id) else { continue };
            let imp = &imp["inner"]["impl"];
            if imp["is_synthetic"] == true || !imp["blanket_impl"].is_null() {
                continue;
            }
            if imp["trait"].is_null() {
                for id in imp["items"].as_array().into_iter().flatten() {
                    if let Some(item) = at.item(id).filter(|i| i["visibility"] == "public") {
                        self.out.insert(format!("pub {}", associated(item, path)));
                    }
                }
            } else {
                let neg = if imp["is_negative"] == true { "!" } else { "" };
                self.out.insert(format!(
                    "impl{} {neg}{} for {path}",
                    generics(&imp["generics"]),
                    resolved(&imp["trait"])
                ));
            }
        }
    }
}

/// ` #[non_exhaustive]` for an item so marked, else nothing: users cannot build or match it whole.
fn non_exhaustive(item: &Value) -> &'static str {
    let marked = item["attrs"].as_array().into_iter().flatten().any(|a| a == "non_exhaustive");
    if marked { " #[non_exhaustive]" } else { "" }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn prim(p: &str) -> Value {
        json!({ "primitive": p })
    }

    /// A crate with one public fn `f(x: <ty>) -> bool` and one struct with a field, as rustdoc
    /// JSON writes them.
    fn fake(param: Value) -> Value {
        json!({
            "format_version": FORMAT_VERSION,
            "root": 0,
            "paths": {},
            "index": {
                "0": { "id": 0, "crate_id": 0, "name": "fake", "visibility": "public",
                       "inner": { "module": { "is_crate": true, "items": [1, 2], "is_stripped": false } } },
                "1": { "id": 1, "crate_id": 0, "name": "f", "visibility": "public",
                       "inner": { "function": {
                           "sig": { "inputs": [["x", param]], "output": prim("bool"), "is_c_variadic": false },
                           "generics": { "params": [], "where_predicates": [] },
                           "header": { "is_const": false, "is_unsafe": false, "is_async": false, "abi": "Rust" },
                           "has_body": true } } },
                "2": { "id": 2, "crate_id": 0, "name": "S", "visibility": "public",
                       "inner": { "struct": {
                           "kind": { "plain": { "fields": [3], "has_stripped_fields": true } },
                           "generics": { "params": [], "where_predicates": [] }, "impls": [] } } },
                "3": { "id": 3, "crate_id": 0, "name": "width", "visibility": "public",
                       "inner": { "struct_field": { "borrowed_ref": { "lifetime": null, "is_mutable": false,
                           "type": { "slice": prim("usize") } } } } }
            }
        })
    }

    fn lines(param: Value) -> Vec<String> {
        let docs = Docs::new(BTreeMap::from([("fake".to_owned(), fake(param))])).unwrap();
        docs.lines("fake", &[]).unwrap().into_iter().collect()
    }

    #[test]
    fn items_are_listed_with_their_signatures() {
        assert_eq!(
            lines(prim("u32")),
            [
                "pub fake::S.width: &[usize]",
                "pub fn fake::f(x: u32) -> bool",
                "pub struct fake::S (and private fields)",
            ]
        );
    }

    #[test]
    fn changing_a_parameter_type_changes_the_listing() {
        let before = lines(prim("u32"));
        let after = lines(json!({ "resolved_path": { "path": "Vec", "id": 9, "args": {
            "angle_bracketed": { "args": [{ "type": prim("u64") }], "constraints": [] } } } }));
        assert_ne!(before, after);
        assert!(after.contains(&"pub fn fake::f(x: Vec<u64>) -> bool".to_owned()), "{after:?}");
    }

    #[test]
    fn another_format_version_is_refused() {
        let mut json = fake(prim("u32"));
        json["format_version"] = json!(FORMAT_VERSION + 1);
        let err = Docs::new(BTreeMap::from([("fake".to_owned(), json)])).err().unwrap();
        assert!(err.to_string().contains("format_version"), "{err}");
    }
}
