//! Graph helpers every rewrite and fusion uses: attributes, names, new nodes, use counts, splicing.

use std::collections::{HashMap, HashSet};

use crate::onnx::{AttributeProto, GraphProto, NodeProto, TensorProto};
use crate::tensor::{self, FLOAT};

pub(crate) const MS_DOMAIN: &str = "com.microsoft";

pub(crate) fn initializer_bytes(g: &GraphProto) -> usize {
    g.initializer
        .iter()
        .map(|t| t.raw_data.as_ref().map_or(0, Vec::len) + 4 * (t.float_data.len() + t.int32_data.len()))
        .sum()
}

pub(crate) fn attr<'a>(n: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    n.attribute.iter().find(|a| a.name.as_deref() == Some(name))
}

pub(crate) fn attr_i(n: &NodeProto, name: &str, default: i64) -> i64 {
    attr(n, name).and_then(|a| a.i).unwrap_or(default)
}

pub(crate) fn attr_f(n: &NodeProto, name: &str, default: f32) -> f32 {
    attr(n, name).and_then(|a| a.f).unwrap_or(default)
}

pub(crate) fn node_name(n: &NodeProto, index: usize) -> String {
    match n.name.as_deref() {
        Some(s) if !s.is_empty() => s.to_owned(),
        _ => format!("#{index}"),
    }
}

pub(crate) fn op(n: &NodeProto) -> &str {
    n.op_type.as_deref().unwrap_or_default()
}

pub(crate) fn default_domain(n: &NodeProto) -> bool {
    matches!(n.domain.as_deref().unwrap_or_default(), "" | "ai.onnx")
}

pub(crate) fn new_node(op_type: &str, domain: &str, name: String, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    let mut n = NodeProto::new();
    n.op_type = Some(op_type.to_owned());
    if !domain.is_empty() {
        n.domain = Some(domain.to_owned());
    }
    n.name = Some(name);
    n.input = inputs.iter().map(|s| (*s).to_owned()).collect();
    n.output = outputs.iter().map(|s| (*s).to_owned()).collect();
    n
}

pub(crate) fn cast_to_float(name: String, input: &str, output: &str) -> NodeProto {
    let mut n = new_node("Cast", "", name, &[input], &[output]);
    n.attribute.push(int_attribute("to", i64::from(FLOAT)));
    n
}

/// A node attribute holding one integer (`AttributeProto.type` INT, 2).
pub(crate) fn int_attribute(name: &str, value: i64) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = Some(name.to_owned());
    a.i = Some(value);
    a.type_ = Some(2);
    a
}

/// A node attribute holding a list of integers (`AttributeProto.type` INTS, 7).
pub(crate) fn ints_attribute(name: &str, values: Vec<i64>) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = Some(name.to_owned());
    a.ints = values;
    a.type_ = Some(7);
    a
}

/// How many times each value is read: by a node of the graph or of any subgraph, or as a graph
/// output.
pub(crate) fn count_uses(g: &GraphProto, uses: &mut HashMap<String, usize>, top: bool) {
    for n in &g.node {
        for i in n.input.iter().filter(|i| !i.is_empty()) {
            *uses.entry(i.clone()).or_default() += 1;
        }
        for a in &n.attribute {
            for sub in a.g.as_ref().into_iter().chain(a.graphs.iter()) {
                count_uses(sub, uses, false);
            }
        }
    }
    if top {
        for o in &g.output {
            *uses.entry(o.name.clone().unwrap_or_default()).or_default() += 1;
        }
    }
}

/// The names a graph uses (values, initializers, inputs, nodes), to make new ones that it does not.
#[derive(Default)]
pub(crate) struct Names(HashSet<String>);

impl Names {
    pub(crate) fn of(g: &GraphProto) -> Self {
        let mut names: HashSet<String> = g.initializer.iter().map(|t| tensor::name(t).to_owned()).collect();
        names.extend(g.input.iter().filter_map(|v| v.name.clone()));
        for n in &g.node {
            names.extend(n.output.iter().cloned());
            names.extend(n.name.clone());
        }
        Names(names)
    }

    /// `base`, or `base_2`, `base_3`... if the graph has it.
    pub(crate) fn fresh(&mut self, base: &str) -> String {
        let mut name = base.to_owned();
        let mut k = 1;
        while self.0.contains(&name) {
            k += 1;
            name = format!("{base}_{k}");
        }
        self.0.insert(name.clone());
        name
    }
}

/// Puts each node list of `replacements` in place of the node at its index (an empty list removes
/// it), and adds `inits`.
pub(crate) fn splice(g: &mut GraphProto, mut replacements: HashMap<usize, Vec<NodeProto>>, inits: Vec<TensorProto>) {
    let old = std::mem::take(&mut g.node);
    for (i, n) in old.into_iter().enumerate() {
        match replacements.remove(&i) {
            Some(nodes) => g.node.extend(nodes),
            None => g.node.push(n),
        }
    }
    g.initializer.extend(inits);
}

/// Removes the nodes whose outputs are all `removable` and read by nothing (no node, subgraph or
/// graph output), until none is left, then the initializers nothing reads.
pub(crate) fn remove_dead(g: &mut GraphProto, removable: impl Fn(&str) -> bool) {
    loop {
        let mut uses = HashMap::new();
        count_uses(g, &mut uses, true);
        let before = g.node.len();
        g.node.retain(|n| !n.output.iter().all(|o| removable(o) && !uses.contains_key(o)));
        if g.node.len() == before {
            let inputs: HashSet<String> = g.input.iter().filter_map(|v| v.name.clone()).collect();
            g.initializer.retain(|t| uses.contains_key(tensor::name(t)) || inputs.contains(tensor::name(t)));
            return;
        }
    }
}

pub(crate) fn computed(op: &str) -> String {
    format!("both inputs are computed at run time (the second by {op}), as in attention; int8 needs a constant weight")
}

pub(crate) fn dims2(t: &TensorProto) -> Option<[usize; 2]> {
    match t.dims.as_slice() {
        [a, b] if *a > 0 && *b > 0 => Some([*a as usize, *b as usize]),
        _ => None,
    }
}
