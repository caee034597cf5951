//! Model-local functions (ONNX IR 8): an operator of the graph's own domain whose body, made of
//! standard operators, is what every runtime runs unless it registers a kernel of that name.

use super::{AttributeProto, FunctionProto, Graph, GraphProto, NodeProto, OperatorSetIdProto};
use super::{MS_DOMAIN, OPSET};

/// The domain of nornir's own operators.
pub(crate) const NORNIR_DOMAIN: &str = "ai.nornir";

impl Graph {
    /// Defines function `name` of [`NORNIR_DOMAIN`] taking `inputs` (their formal names, some
    /// optional: a caller may pass "") and the attributes named in `attributes` (which a
    /// registered kernel reads; the body has its values built in), giving `build`'s value as its one output `y`. `build`
    /// uses the graph's own builder; a constant it makes becomes a `Constant` node of the body
    /// (a function has no initializers) and a name shared with the graph ([`Graph::constant_i64`])
    /// is the body's own. Returns nothing: nodes then call it by `name` ([`Graph::node`] with
    /// [`NORNIR_DOMAIN`]). A second definition of one name is ignored.
    pub(crate) fn define_function(
        &mut self,
        name: &str,
        inputs: &[&str],
        attributes: &[&str],
        build: impl FnOnce(&mut Graph) -> String,
    ) {
        if self.functions.iter().any(|f| f.name.as_deref() == Some(name)) {
            return;
        }
        let mut body = GraphProto::new();
        std::mem::swap(&mut self.g, &mut body);
        let shared = std::mem::take(&mut self.initializers);
        let sink = self.sink.take();
        let output = build(self);
        self.sink = sink;
        self.initializers = shared;
        std::mem::swap(&mut self.g, &mut body);
        let mut f = FunctionProto::new();
        f.name = Some(name.to_owned());
        f.domain = Some(NORNIR_DOMAIN.to_owned());
        f.input = inputs.iter().map(|i| (*i).to_owned()).collect();
        f.output = vec!["y".to_owned()];
        f.attribute = attributes.iter().map(|a| (*a).to_owned()).collect();
        f.node = body.initializer.into_iter().map(constant_node).collect();
        f.node.append(&mut body.node);
        let mut y = NodeProto::new();
        y.op_type = Some("Identity".to_owned());
        y.input = vec![output];
        y.output = vec!["y".to_owned()];
        f.node.push(y);
        f.opset_import = [("", OPSET), (MS_DOMAIN, 1)].into_iter().map(|(d, v)| opset(d, v)).collect();
        self.functions.push(f);
    }
}

/// `Constant(value = t)`, writing `t`'s name.
fn constant_node(mut t: super::TensorProto) -> NodeProto {
    let mut n = NodeProto::new();
    n.op_type = Some("Constant".to_owned());
    n.output = vec![t.name.take().unwrap_or_default()];
    let mut a = AttributeProto::new();
    a.name = Some("value".to_owned());
    a.type_ = Some(4);
    a.t = Some(t).into();
    n.attribute.push(a);
    n
}

pub(super) fn opset(domain: &str, version: i64) -> OperatorSetIdProto {
    let mut o = OperatorSetIdProto::new();
    o.domain = Some(domain.to_owned());
    o.version = Some(version);
    o
}
