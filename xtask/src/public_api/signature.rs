//! Rust signatures written back from rustdoc JSON: types, generics, bounds, where clauses,
//! functions and associated items, each as one line of text for the public API listing.

use serde_json::Value;

/// A method, associated constant or type of `owner`.
pub(super) fn associated(item: &Value, owner: &str) -> String {
    let name = item["name"].as_str().unwrap_or("_");
    let inner = &item["inner"];
    if let Some(f) = inner.get("function") {
        return function(&format!("{owner}::{name}"), f);
    }
    if let Some(c) = inner.get("assoc_const") {
        return format!("const {owner}::{name}: {}", ty(&c["type"]));
    }
    if let Some(t) = inner.get("assoc_type") {
        let b = bounds(&t["bounds"]);
        let b = if b.is_empty() { String::new() } else { format!(": {b}") };
        let d = if t["type"].is_null() { String::new() } else { format!(" = {}", ty(&t["type"])) };
        return format!("type {owner}::{name}{}{b}{d}", generics(&t["generics"]));
    }
    format!("{owner}::{name} {}", compact(inner))
}

pub(super) fn function(path: &str, f: &Value) -> String {
    let h = &f["header"];
    let mut quals = String::new();
    for (flag, word) in [("is_const", "const "), ("is_async", "async "), ("is_unsafe", "unsafe ")] {
        if h[flag] == true {
            quals.push_str(word);
        }
    }
    let params: Vec<String> = f["sig"]["inputs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let name = p[0].as_str().unwrap_or("_");
            let t = ty(&p[1]);
            if name == "self" { self_param(&p[1], &t) } else { format!("{name}: {t}") }
        })
        .collect();
    let out = &f["sig"]["output"];
    let ret = if out.is_null() { String::new() } else { format!(" -> {}", ty(out)) };
    let g = &f["generics"];
    format!("{quals}fn {path}{}({}){ret}{}", generics(g), params.join(", "), where_clause(g))
}

/// `self`, `&self`, `&mut self`, or `self: T`.
fn self_param(t: &Value, rendered: &str) -> String {
    match rendered {
        "Self" => "self".to_owned(),
        "&Self" => "&self".to_owned(),
        "&mut Self" => "&mut self".to_owned(),
        _ if t.get("borrowed_ref").is_some() => format!("self: {rendered}"),
        _ => format!("self: {rendered}"),
    }
}

/// `<T: Bound, 'a, const N: usize>`, or nothing.
pub(super) fn generics(g: &Value) -> String {
    let params: Vec<String> = g["params"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let name = p["name"].as_str().unwrap_or("_");
            let kind = &p["kind"];
            if let Some(l) = kind.get("lifetime") {
                let outlives: Vec<&str> =
                    l["outlives"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
                return Some(if outlives.is_empty() {
                    name.to_owned()
                } else {
                    format!("{name}: {}", outlives.join(" + "))
                });
            }
            if let Some(t) = kind.get("type") {
                if t["is_synthetic"] == true {
                    return None; // `impl Trait` in argument position, shown there.
                }
                let b = bounds(&t["bounds"]);
                let d = if t["default"].is_null() { String::new() } else { format!(" = {}", ty(&t["default"])) };
                return Some(if b.is_empty() { format!("{name}{d}") } else { format!("{name}: {b}{d}") });
            }
            if let Some(c) = kind.get("const") {
                return Some(format!("const {name}: {}", ty(&c["type"])));
            }
            Some(name.to_owned())
        })
        .collect();
    if params.is_empty() { String::new() } else { format!("<{}>", params.join(", ")) }
}

fn where_clause(g: &Value) -> String {
    let preds: Vec<String> = g["where_predicates"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            if let Some(b) = p.get("bound_predicate") {
                format!("{}: {}", ty(&b["type"]), bounds(&b["bounds"]))
            } else if let Some(l) = p.get("lifetime_predicate") {
                format!("{}: {}", l["lifetime"].as_str().unwrap_or("'_"), compact(&l["outlives"]))
            } else if let Some(e) = p.get("eq_predicate") {
                format!("{} = {}", ty(&e["lhs"]), compact(&e["rhs"]))
            } else {
                compact(p)
            }
        })
        .collect();
    if preds.is_empty() { String::new() } else { format!(" where {}", preds.join(", ")) }
}

pub(super) fn bounds(b: &Value) -> String {
    let all: Vec<String> = b
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| {
            if let Some(t) = b.get("trait_bound") {
                let modifier = match t["modifier"].as_str() {
                    Some("maybe") => "?",
                    Some("maybe_const") => "~const ",
                    _ => "",
                };
                format!("{modifier}{}", resolved(&t["trait"]))
            } else if let Some(l) = b.get("outlives") {
                l.as_str().unwrap_or("'_").to_owned()
            } else if let Some(u) = b.get("use") {
                format!("use<{}>", compact(u))
            } else {
                compact(b)
            }
        })
        .collect();
    all.join(" + ")
}

/// A path type: its last name as written, with its generic arguments.
pub(super) fn resolved(p: &Value) -> String {
    let path = p["path"].as_str().unwrap_or("?");
    let name = path.rsplit("::").next().unwrap_or(path);
    format!("{name}{}", args(&p["args"]))
}

fn args(a: &Value) -> String {
    if let Some(ab) = a.get("angle_bracketed") {
        let mut all: Vec<String> = ab["args"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|g| {
                if let Some(t) = g.get("type") {
                    ty(t)
                } else if let Some(l) = g.get("lifetime") {
                    l.as_str().unwrap_or("'_").to_owned()
                } else if let Some(c) = g.get("const") {
                    c["expr"].as_str().unwrap_or("_").to_owned()
                } else {
                    "_".to_owned()
                }
            })
            .collect();
        for c in ab["constraints"].as_array().into_iter().flatten() {
            let name = c["name"].as_str().unwrap_or("_");
            let binding = &c["binding"];
            if let Some(eq) = binding.get("equality") {
                all.push(format!("{name} = {}", eq.get("type").map_or_else(|| compact(eq), ty)));
            } else if let Some(b) = binding.get("constraint") {
                all.push(format!("{name}: {}", bounds(b)));
            }
        }
        return if all.is_empty() { String::new() } else { format!("<{}>", all.join(", ")) };
    }
    if let Some(p) = a.get("parenthesized") {
        let inputs: Vec<String> = p["inputs"].as_array().into_iter().flatten().map(ty).collect();
        let out = if p["output"].is_null() { String::new() } else { format!(" -> {}", ty(&p["output"])) };
        return format!("({}){out}", inputs.join(", "));
    }
    String::new()
}

/// A type as Rust writes it (anything this reader does not know: its JSON).
pub(super) fn ty(t: &Value) -> String {
    let Some((kind, v)) = t.as_object().and_then(|o| o.iter().next()) else { return compact(t) };
    match kind.as_str() {
        "resolved_path" => resolved(v),
        "generic" | "primitive" => v.as_str().unwrap_or("?").to_owned(),
        "tuple" => {
            let items: Vec<String> = v.as_array().into_iter().flatten().map(ty).collect();
            if items.len() == 1 { format!("({},)", items[0]) } else { format!("({})", items.join(", ")) }
        }
        "slice" => format!("[{}]", ty(v)),
        "array" => format!("[{}; {}]", ty(&v["type"]), v["len"].as_str().unwrap_or("_")),
        "borrowed_ref" => {
            let l = v["lifetime"].as_str().map_or(String::new(), |l| format!("{l} "));
            let m = if v["is_mutable"] == true { "mut " } else { "" };
            format!("&{l}{m}{}", ty(&v["type"]))
        }
        "raw_pointer" => {
            format!("*{} {}", if v["is_mutable"] == true { "mut" } else { "const" }, ty(&v["type"]))
        }
        "impl_trait" => format!("impl {}", bounds(v)),
        "dyn_trait" => {
            let traits: Vec<String> =
                v["traits"].as_array().into_iter().flatten().map(|p| resolved(&p["trait"])).collect();
            let l = v["lifetime"].as_str().map_or(String::new(), |l| format!(" + {l}"));
            format!("dyn {}{l}", traits.join(" + "))
        }
        "function_pointer" => {
            let params: Vec<String> = v["sig"]["inputs"].as_array().into_iter().flatten().map(|p| ty(&p[1])).collect();
            let out = &v["sig"]["output"];
            let ret = if out.is_null() { String::new() } else { format!(" -> {}", ty(out)) };
            format!("fn({}){ret}", params.join(", "))
        }
        "qualified_path" => {
            let self_ty = ty(&v["self_type"]);
            let name = v["name"].as_str().unwrap_or("_");
            match v.get("trait").filter(|t| !t.is_null()) {
                Some(tr) => format!("<{self_ty} as {}>::{name}", resolved(tr)),
                None => format!("{self_ty}::{name}"),
            }
        }
        "infer" => "_".to_owned(),
        _ => compact(t),
    }
}

/// A JSON value on one line, for shapes this reader does not render.
fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}
