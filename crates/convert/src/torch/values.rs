//! The values the pickle machine builds: numbers, strings, tuples, lists and dicts, allowed
//! globals as tags, storages and tensor records. A container knows how deep it nests and is
//! frozen once it is put inside another (a pickle `torch.save` writes builds each container whole
//! before it uses it), so no value nests deeper than [`MAX_DEPTH`] and none contains itself:
//! dropping or walking one never recurses further than that, and no `Rc` cycle leaks.

use std::cell::RefCell;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::rc::Rc;

use safetensors::tensor::Dtype;

/// Why a pickle was not read; the caller names the file.
#[derive(Debug, PartialEq)]
pub(crate) enum PickleError {
    /// The stream stopped before `STOP`, or an argument runs past its end.
    EndsEarly {
        at: usize,
    },
    UnknownOpcode {
        opcode: u8,
        at: usize,
    },
    /// A global outside the allow-list, as `module.name`.
    Global {
        name: String,
    },
    /// Opcodes that are valid pickle but do not make a state dict.
    Malformed {
        at: usize,
        why: String,
    },
    /// Containers (or MARKs) nested deeper than [`MAX_DEPTH`].
    TooDeep {
        at: usize,
    },
    /// More than [`super::pickle::MAX_VALUES`] values built.
    TooMany {
        at: usize,
    },
    /// A list or dict changed after it was put inside another container, or put inside itself.
    Changed {
        at: usize,
    },
    /// A tensor of more than [`MAX_RANK`] dimensions.
    TooManyDims {
        at: usize,
        dims: usize,
    },
}

/// How deep containers may nest. A state dict nests 3 (the `_metadata` of its `BUILD`: a dict
/// of an OrderedDict of dicts); a tensor's arguments 2.
pub(crate) const MAX_DEPTH: usize = 1_000;
/// The most dimensions a tensor may have (weights have 1 to 4).
pub(crate) const MAX_RANK: usize = 64;

/// A storage class `torch.save` names in a persistent id, as the dtype of its elements.
fn storage_dtype(name: &str) -> Option<Dtype> {
    Some(match name {
        "FloatStorage" => Dtype::F32,
        "HalfStorage" => Dtype::F16,
        "BFloat16Storage" => Dtype::BF16,
        "DoubleStorage" => Dtype::F64,
        "LongStorage" => Dtype::I64,
        "IntStorage" => Dtype::I32,
        "ShortStorage" => Dtype::I16,
        "CharStorage" => Dtype::I8,
        "ByteStorage" => Dtype::U8,
        "BoolStorage" => Dtype::BOOL,
        _ => return None,
    })
}

/// The names a pickle may use: a tag for each, never the thing itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Global {
    RebuildTensor,
    RebuildParameter,
    OrderedDict,
    Storage(Dtype),
}

impl Global {
    pub(crate) fn find(module: &str, name: &str) -> Option<Global> {
        match (module, name) {
            ("torch._utils", "_rebuild_tensor_v2") => Some(Global::RebuildTensor),
            ("torch._utils", "_rebuild_parameter") => Some(Global::RebuildParameter),
            ("collections", "OrderedDict") => Some(Global::OrderedDict),
            ("torch", storage) => storage_dtype(storage).map(Global::Storage),
            _ => None,
        }
    }
}

/// A tensor as `_rebuild_tensor_v2` would build it: where its elements are and how they lie.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TensorRecord {
    /// The storage's key: its bytes are `<archive>/data/<key>`.
    pub(crate) key: Rc<str>,
    pub(crate) dtype: Dtype,
    /// In elements, from the start of the storage.
    pub(crate) offset: usize,
    pub(crate) shape: Vec<usize>,
    pub(crate) stride: Vec<usize>,
}

/// A value on the pickle machine's stack. Lists and dicts are shared, as Python's are, so that a
/// memoized one sees the items added after it was memoized (until it is put inside another).
#[derive(Debug, Clone)]
pub(crate) enum Value {
    None,
    /// True or false: which does not matter to a tensor.
    Bool,
    Int(i64),
    /// A float: its value does not matter to a tensor.
    Float,
    /// Interned by the machine: equal strings of one pickle are one `Rc`.
    Str(Rc<str>),
    Tuple(Rc<Tuple>),
    List(Rc<RefCell<List>>),
    Dict(Rc<RefCell<Dict>>),
    Global(Global),
    /// A persistent id resolved: a storage of the archive.
    Storage {
        dtype: Dtype,
        key: Rc<str>,
    },
    Tensor(Rc<TensorRecord>),
}

#[derive(Debug)]
pub(crate) struct Tuple {
    pub(crate) items: Vec<Value>,
    depth: usize,
}

#[derive(Debug)]
pub(crate) struct List {
    items: Vec<Value>,
    depth: usize,
    /// Put inside another container: it no longer changes.
    placed: bool,
}

/// A dict in the order its keys were first set; a key set again keeps its place and takes the
/// last value, as Python's dict does.
#[derive(Debug)]
pub(crate) struct Dict {
    pub(crate) items: Vec<(Value, Value)>,
    /// Where each string or integer key is in `items`; other keys never equal one another.
    index: HashMap<Key, usize>,
    depth: usize,
    placed: bool,
}

/// The identity of an interned string: equal strings of one pickle have one, so a string is
/// found in a map by one hash of a word, however long it is (a long string reused through the
/// memo would otherwise be hashed whole at each use).
pub(crate) fn string_id(s: &Rc<str>) -> usize {
    Rc::as_ptr(s).cast::<u8>() as usize
}

/// A dict key as compared: a string by its interned `Rc` (equal strings are one), an integer by
/// its value.
#[derive(Debug, PartialEq, Eq, Hash)]
enum Key {
    Str(usize),
    Int(i64),
}

impl Key {
    fn of(v: &Value) -> Option<Key> {
        match v {
            Value::Str(s) => Some(Key::Str(string_id(s))),
            Value::Int(i) => Some(Key::Int(*i)),
            _ => None,
        }
    }
}

impl Value {
    pub(crate) fn empty_list() -> Value {
        Value::List(Rc::new(RefCell::new(List { items: Vec::new(), depth: 1, placed: false })))
    }

    pub(crate) fn empty_dict() -> Value {
        Value::Dict(Rc::new(RefCell::new(Dict { items: Vec::new(), index: HashMap::new(), depth: 1, placed: false })))
    }

    /// A tuple of `items`, which are put inside it.
    pub(crate) fn tuple(items: Vec<Value>, at: usize) -> Result<Value, PickleError> {
        let depth = deeper(&items, at)?;
        Ok(Value::Tuple(Rc::new(Tuple { items, depth })))
    }

    /// How deep it nests: 0 for what is not a container, 1 and its deepest item's for one.
    fn depth(&self) -> usize {
        match self {
            Value::Tuple(t) => t.depth,
            Value::List(l) => l.borrow().depth,
            Value::Dict(d) => d.borrow().depth,
            _ => 0,
        }
    }

    /// Marks a list or dict as put inside a container: from now on it cannot change.
    fn place(&self) {
        match self {
            Value::List(l) => l.borrow_mut().placed = true,
            Value::Dict(d) => d.borrow_mut().placed = true,
            _ => {}
        }
    }
}

/// The depth of a container holding `items`, which are marked as put inside it.
fn deeper(items: &[Value], at: usize) -> Result<usize, PickleError> {
    let mut depth = 1;
    for v in items {
        v.place();
        depth = depth.max(v.depth() + 1);
    }
    if depth > MAX_DEPTH {
        return Err(PickleError::TooDeep { at });
    }
    Ok(depth)
}

/// `APPEND`, `APPENDS`: `items` added to `list`, refused where the list was put inside another
/// container or would be put inside itself.
pub(crate) fn append(list: &Rc<RefCell<List>>, items: Vec<Value>, at: usize) -> Result<(), PickleError> {
    let itself = |v: &Value| matches!(v, Value::List(l) if Rc::ptr_eq(l, list));
    if list.borrow().placed || items.iter().any(itself) {
        return Err(PickleError::Changed { at });
    }
    let depth = deeper(&items, at)?;
    let mut l = list.borrow_mut();
    l.depth = l.depth.max(depth);
    l.items.extend(items);
    Ok(())
}

/// `SETITEM`, `SETITEMS`: the pairs of `items` (keys and values alternating, an even number) set
/// in `dict`, the last value of a key winning; refused as [`append`] is.
pub(crate) fn set_items(dict: &Rc<RefCell<Dict>>, items: Vec<Value>, at: usize) -> Result<(), PickleError> {
    let itself = |v: &Value| matches!(v, Value::Dict(d) if Rc::ptr_eq(d, dict));
    if dict.borrow().placed || items.iter().any(itself) {
        return Err(PickleError::Changed { at });
    }
    let depth = deeper(&items, at)?;
    let mut d = dict.borrow_mut();
    d.depth = d.depth.max(depth);
    let mut it = items.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        d.insert(k, v);
    }
    Ok(())
}

impl Dict {
    fn insert(&mut self, k: Value, v: Value) {
        let Some(key) = Key::of(&k) else {
            self.items.push((k, v));
            return;
        };
        match self.index.entry(key) {
            Entry::Occupied(slot) => {
                if let Some(item) = self.items.get_mut(*slot.get()) {
                    item.1 = v;
                }
            }
            Entry::Vacant(slot) => {
                slot.insert(self.items.len());
                self.items.push((k, v));
            }
        }
    }
}

fn usize_of(v: &Value) -> Option<usize> {
    match v {
        Value::Int(i) => usize::try_from(*i).ok(),
        _ => None,
    }
}

fn usizes(v: &Value) -> Option<Vec<usize>> {
    match v {
        Value::Tuple(t) => t.items.iter().map(usize_of).collect(),
        _ => None,
    }
}

/// `('storage', <storage type>, key, location, numel)`, the persistent id `torch.save` writes.
pub(crate) fn persistent(pid: &Value) -> Option<Value> {
    let Value::Tuple(t) = pid else { return None };
    match t.items.as_slice() {
        [Value::Str(kind), Value::Global(Global::Storage(dtype)), Value::Str(key), Value::Str(_), Value::Int(_)]
            if &**kind == "storage" =>
        {
            Some(Value::Storage { dtype: *dtype, key: key.clone() })
        }
        _ => None,
    }
}

/// What `REDUCE` of an allowed global builds, without calling anything.
pub(crate) fn reduce(callable: &Value, args: &Value, at: usize) -> Result<Value, PickleError> {
    let not_a_tensor = |g: &Global| PickleError::Malformed {
        at,
        why: format!("REDUCE of {g:?} has arguments that are not a tensor's"),
    };
    let Value::Global(g) = callable else {
        return Err(PickleError::Malformed { at, why: "REDUCE of a value that is not an allowed global".to_owned() });
    };
    let Value::Tuple(args) = args else { return Err(not_a_tensor(g)) };
    match (g, args.items.as_slice()) {
        (Global::OrderedDict, []) => Ok(Value::empty_dict()),
        // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
        (Global::RebuildTensor, [Value::Storage { dtype, key }, offset, size, stride, _, _, ..])
            if args.items.len() <= 7 =>
        {
            for dims in [size, stride] {
                if let Value::Tuple(t) = dims
                    && t.items.len() > MAX_RANK
                {
                    return Err(PickleError::TooManyDims { at, dims: t.items.len() });
                }
            }
            let (Some(offset), Some(shape), Some(stride)) = (usize_of(offset), usizes(size), usizes(stride)) else {
                return Err(not_a_tensor(g));
            };
            if shape.len() != stride.len() {
                return Err(not_a_tensor(g));
            }
            Ok(Value::Tensor(Rc::new(TensorRecord { key: key.clone(), dtype: *dtype, offset, shape, stride })))
        }
        // (data, requires_grad, backward_hooks)
        (Global::RebuildParameter, [t @ Value::Tensor(_), _, _]) => Ok(t.clone()),
        _ => Err(not_a_tensor(g)),
    }
}
