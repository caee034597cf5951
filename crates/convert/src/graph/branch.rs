//! `If`'s branches and `Loop`'s body: subgraphs made with the graph's own node builder, reading
//! the values of the graph around them by name; and the walks that must see their nodes too.

use super::{Graph, GraphProto, INT64, NodeProto, TensorShapeProto, TypeProto, ValueInfoProto, type_proto};

/// Bool, as ONNX numbers its element types.
const BOOL: i32 = 9;

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
        branch.output.push(typed(&output, elem_type));
        branch
    }

    /// A `Loop`'s body named `name`, for a loop without carried values that stacks one value per
    /// iteration: `build` gets the iteration number (an int64 scalar) and returns the value of
    /// `elem_type` to stack; the loop goes on while its trip count lasts. Initializers and values
    /// from outside behave as in [`Graph::branch`].
    pub(crate) fn loop_body(
        &mut self,
        name: &str,
        elem_type: i32,
        build: impl FnOnce(&mut Graph, &str) -> String,
    ) -> GraphProto {
        let iteration = format!("{name}.iteration");
        let condition = format!("{name}.condition");
        let mut body = self.branch(name, elem_type, |g| {
            let out = build(g, &iteration);
            g.node("Identity", "", &[&condition], &[], Some(&format!("{name}.condition_out")));
            out
        });
        body.input = vec![scalar(&iteration, INT64), scalar(&condition, BOOL)];
        // The condition's output comes first, then the stacked value.
        body.output.insert(0, typed(&format!("{name}.condition_out"), BOOL));
        body
    }
}

/// A scalar value named `name` of element type `elem_type` (ONNX Runtime wants a `Loop` body's
/// inputs shaped).
fn scalar(name: &str, elem_type: i32) -> ValueInfoProto {
    let mut v = typed(name, elem_type);
    if let Some(ty) = v.type_.as_mut()
        && let Some(tensor) = ty.tensor_type.as_mut()
    {
        tensor.shape = Some(TensorShapeProto::new()).into();
    }
    v
}

/// A value named `name` of element type `elem_type` (its shape left to inference).
fn typed(name: &str, elem_type: i32) -> ValueInfoProto {
    let mut tensor = type_proto::Tensor::new();
    tensor.elem_type = Some(elem_type);
    let mut ty = TypeProto::new();
    ty.tensor_type = Some(tensor).into();
    let mut v = ValueInfoProto::new();
    v.name = Some(name.to_owned());
    v.type_ = Some(ty).into();
    v
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
