//! `If`'s branches: subgraphs made with the graph's own node builder, reading the values of the
//! graph around them by name; and the walks that must see their nodes too.

use super::{Graph, GraphProto, NodeProto, TypeProto, ValueInfoProto, type_proto};

impl Graph {
    /// A branch named `name`: the nodes `build` adds, whose value (it returns its name) is the
    /// branch's one output, of `elem_type` and a shape ONNX Runtime infers. An initializer
    /// `build` makes goes to the graph around it, where every name is unique, so a constant
    /// shared by name ([`Graph::constant_i64`]) is readable everywhere; a value `build` reads
    /// from outside must be made before (inside, [`Graph::has_value`] sees the branch only).
    pub(crate) fn branch(
        &mut self,
        name: &str,
        elem_type: i32,
        build: impl FnOnce(&mut Graph) -> String,
    ) -> GraphProto {
        let mut branch = GraphProto::new();
        branch.name = Some(name.to_owned());
        std::mem::swap(&mut self.g, &mut branch);
        let output = build(self);
        std::mem::swap(&mut self.g, &mut branch);
        self.g.initializer.append(&mut branch.initializer);
        let mut tensor = type_proto::Tensor::new();
        tensor.elem_type = Some(elem_type);
        let mut ty = TypeProto::new();
        ty.tensor_type = Some(tensor).into();
        let mut v = ValueInfoProto::new();
        v.name = Some(output);
        v.type_ = Some(ty).into();
        branch.output.push(v);
        branch
    }
}

/// The subgraphs of node `n` (an `If`'s two branches).
fn branches(n: &mut NodeProto) -> impl Iterator<Item = &mut GraphProto> {
    n.attribute.iter_mut().filter_map(|a| a.g.as_mut())
}

/// Renames value `from` to `to` in `g` and its branches.
pub(super) fn rename_in(g: &mut GraphProto, from: &str, to: &str) {
    for n in &mut g.node {
        for v in n.output.iter_mut().chain(n.input.iter_mut()).filter(|v| *v == from) {
            *v = to.to_owned();
        }
        for b in branches(n) {
            rename_in(b, from, to);
            for v in b.output.iter_mut().filter(|v| v.name.as_deref() == Some(from)) {
                v.name = Some(to.to_owned());
            }
        }
    }
}

/// Adds the node counts by operator of `g` and its branches to `counts`.
pub(super) fn count_ops(g: &GraphProto, counts: &mut Vec<(String, usize)>) {
    for n in &g.node {
        let op = n.op_type.clone().unwrap_or_default();
        match counts.iter_mut().find(|(o, _)| *o == op) {
            Some((_, c)) => *c += 1,
            None => counts.push((op, 1)),
        }
        for b in n.attribute.iter().filter_map(|a| a.g.as_ref()) {
            count_ops(b, counts);
        }
    }
}
