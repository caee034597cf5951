//! The pickle machine of `data.pkl`: the opcodes `torch.save` writes for a state dict (pickle
//! protocol 2, and the few of protocols 3 to 5 a newer pickler may add), and nothing that runs
//! code. A global is a name checked against an allow-list and kept as a tag; `REDUCE` of
//! `_rebuild_tensor_v2` records a tensor (its storage, offset, shape and stride), `BINPERSID`
//! records a storage of the archive, and no other call is made or can be.

use std::cell::RefCell;
use std::rc::Rc;

use safetensors::tensor::Dtype;

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
    fn find(module: &str, name: &str) -> Option<Global> {
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
    pub(crate) key: String,
    pub(crate) dtype: Dtype,
    /// In elements, from the start of the storage.
    pub(crate) offset: usize,
    pub(crate) shape: Vec<usize>,
    pub(crate) stride: Vec<usize>,
}

/// A value on the pickle machine's stack. Lists and dicts are shared, as Python's are, so that a
/// memoized one sees the items added after it was memoized.
#[derive(Debug, Clone)]
pub(crate) enum Value {
    None,
    /// True or false: which does not matter to a tensor.
    Bool,
    Int(i64),
    /// A float: its value does not matter to a tensor.
    Float,
    Str(String),
    Tuple(Rc<Vec<Value>>),
    List(Rc<RefCell<Vec<Value>>>),
    Dict(Rc<RefCell<Vec<(Value, Value)>>>),
    Global(Global),
    /// A persistent id resolved: a storage of the archive.
    Storage {
        dtype: Dtype,
        key: String,
    },
    Tensor(Rc<TensorRecord>),
}

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
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: std::collections::HashMap<u32, Value>,
}

/// Runs the pickle `data` to its `STOP` and returns the value it built.
pub(crate) fn load(data: &[u8]) -> Result<Value, PickleError> {
    let mut m = Machine { data, pos: 0, stack: Vec::new(), marks: Vec::new(), memo: std::collections::HashMap::new() };
    m.run()
}

impl<'a> Machine<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], PickleError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        let Some(end) = end else { return Err(PickleError::EndsEarly { at: self.data.len() }) };
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, PickleError> {
        Ok(self.take(1)?[0])
    }
    fn le<const N: usize>(&mut self) -> Result<[u8; N], PickleError> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn len(&mut self, n: u64, at: usize) -> Result<usize, PickleError> {
        usize::try_from(n).map_err(|_| PickleError::EndsEarly { at })
    }
    fn line(&mut self) -> Result<&'a str, PickleError> {
        let rest = &self.data[self.pos..];
        let Some(n) = rest.iter().position(|&b| b == b'\n') else {
            return Err(PickleError::EndsEarly { at: self.data.len() });
        };
        let at = self.pos;
        self.pos += n + 1;
        std::str::from_utf8(&rest[..n]).map_err(|_| malformed(at, "a global's name is not UTF-8"))
    }
    fn text(&mut self, n: usize, at: usize) -> Result<Value, PickleError> {
        let bytes = self.take(n)?;
        let s = std::str::from_utf8(bytes).map_err(|_| malformed(at, "a string is not UTF-8"))?;
        Ok(Value::Str(s.to_owned()))
    }
    fn pop(&mut self, at: usize) -> Result<Value, PickleError> {
        self.stack.pop().ok_or_else(|| malformed(at, "an opcode takes from an empty stack"))
    }
    fn top(&mut self, at: usize) -> Result<&mut Value, PickleError> {
        self.stack.last_mut().ok_or_else(|| malformed(at, "an opcode takes from an empty stack"))
    }
    /// The items above the last mark, and the mark removed.
    fn pop_mark(&mut self, at: usize) -> Result<Vec<Value>, PickleError> {
        let mark = self.marks.pop().ok_or_else(|| malformed(at, "an opcode needs a MARK that is not there"))?;
        if mark > self.stack.len() {
            return Err(malformed(at, "a MARK lies above the stack"));
        }
        Ok(self.stack.split_off(mark))
    }
    fn memo_put(&mut self, key: u32, at: usize) -> Result<(), PickleError> {
        let v = self.stack.last().cloned().ok_or_else(|| malformed(at, "memoizes an empty stack"))?;
        self.memo.insert(key, v);
        Ok(())
    }
    fn memo_get(&mut self, key: u32, at: usize) -> Result<(), PickleError> {
        let v = self
            .memo
            .get(&key)
            .cloned()
            .ok_or_else(|| malformed(at, &format!("memo {key} is read before it is written")))?;
        self.stack.push(v);
        Ok(())
    }
    fn global(&mut self, module: &str, name: &str) -> Result<(), PickleError> {
        let g = Global::find(module, name).ok_or_else(|| PickleError::Global { name: format!("{module}.{name}") })?;
        self.stack.push(Value::Global(g));
        Ok(())
    }
    fn set_items(&mut self, items: Vec<Value>, at: usize) -> Result<(), PickleError> {
        if !items.len().is_multiple_of(2) {
            return Err(malformed(at, "SETITEMS has a key without a value"));
        }
        let Value::Dict(d) = self.top(at)? else { return Err(malformed(at, "SETITEMS on a value that is not a dict")) };
        let mut d = d.borrow_mut();
        let mut it = items.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            match d.iter_mut().find(|(old, _)| same_key(old, &k)) {
                Some(slot) => slot.1 = v,
                None => d.push((k, v)),
            }
        }
        Ok(())
    }
    fn append(&mut self, items: Vec<Value>, at: usize) -> Result<(), PickleError> {
        let Value::List(l) = self.top(at)? else { return Err(malformed(at, "APPEND on a value that is not a list")) };
        l.borrow_mut().extend(items);
        Ok(())
    }

    fn run(&mut self) -> Result<Value, PickleError> {
        loop {
            let at = self.pos;
            let op = self.u8()?;
            match op {
                0x80 => {
                    // PROTO
                    self.u8()?;
                }
                0x95 => {
                    // FRAME: a length hint only.
                    self.take(8)?;
                }
                b'.' => return self.pop(at),
                b'}' => self.stack.push(Value::Dict(Rc::default())),
                b']' => self.stack.push(Value::List(Rc::default())),
                b')' => self.stack.push(Value::Tuple(Rc::new(Vec::new()))),
                b'(' => self.marks.push(self.stack.len()),
                b't' => {
                    let items = self.pop_mark(at)?;
                    self.stack.push(Value::Tuple(Rc::new(items)));
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    if self.stack.len() < n {
                        return Err(malformed(at, "TUPLE takes more items than the stack holds"));
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    self.stack.push(Value::Tuple(Rc::new(items)));
                }
                b'X' => {
                    let n = u64::from(u32::from_le_bytes(self.le()?));
                    let n = self.len(n, at)?;
                    let v = self.text(n, at)?;
                    self.stack.push(v);
                }
                0x8c => {
                    let n = usize::from(self.u8()?);
                    let v = self.text(n, at)?;
                    self.stack.push(v);
                }
                0x8d => {
                    let n = u64::from_le_bytes(self.le()?);
                    let n = self.len(n, at)?;
                    let v = self.text(n, at)?;
                    self.stack.push(v);
                }
                b'U' | b'T' => {
                    // SHORT_BINSTRING, BINSTRING: Python 2's byte strings, read as Latin-1.
                    let n = if op == b'U' { u64::from(self.u8()?) } else { u64::from(u32::from_le_bytes(self.le()?)) };
                    let n = self.len(n, at)?;
                    let s = self.take(n)?.iter().map(|&b| char::from(b)).collect();
                    self.stack.push(Value::Str(s));
                }
                b'J' => {
                    let v = i32::from_le_bytes(self.le()?);
                    self.stack.push(Value::Int(i64::from(v)));
                }
                b'K' => {
                    let v = self.u8()?;
                    self.stack.push(Value::Int(i64::from(v)));
                }
                b'M' => {
                    let v = u16::from_le_bytes(self.le()?);
                    self.stack.push(Value::Int(i64::from(v)));
                }
                0x8a | 0x8b => {
                    // LONG1, LONG4: little-endian two's complement of n bytes.
                    let n = if op == 0x8a { u64::from(self.u8()?) } else { u64::from(u32::from_le_bytes(self.le()?)) };
                    let n = self.len(n, at)?;
                    let bytes = self.take(n)?;
                    if n > 8 {
                        return Err(malformed(at, "an integer does not fit in 64 bits"));
                    }
                    let fill = if bytes.last().is_some_and(|&b| b & 0x80 != 0) { 0xff } else { 0 };
                    let mut a = [fill; 8];
                    a[..n].copy_from_slice(bytes);
                    self.stack.push(Value::Int(i64::from_le_bytes(a)));
                }
                b'G' => {
                    self.take(8)?;
                    self.stack.push(Value::Float);
                }
                0x88 | 0x89 => self.stack.push(Value::Bool),
                b'N' => self.stack.push(Value::None),
                b'q' => {
                    let k = u32::from(self.u8()?);
                    self.memo_put(k, at)?;
                }
                b'r' => {
                    let k = u32::from_le_bytes(self.le()?);
                    self.memo_put(k, at)?;
                }
                0x94 => {
                    let k = u32::try_from(self.memo.len()).map_err(|_| malformed(at, "the memo is full"))?;
                    self.memo_put(k, at)?;
                }
                b'h' => {
                    let k = u32::from(self.u8()?);
                    self.memo_get(k, at)?;
                }
                b'j' => {
                    let k = u32::from_le_bytes(self.le()?);
                    self.memo_get(k, at)?;
                }
                b'0' => {
                    self.pop(at)?;
                }
                b's' => {
                    let v = self.pop(at)?;
                    let k = self.pop(at)?;
                    self.set_items(vec![k, v], at)?;
                }
                b'u' => {
                    let items = self.pop_mark(at)?;
                    self.set_items(items, at)?;
                }
                b'a' => {
                    let v = self.pop(at)?;
                    self.append(vec![v], at)?;
                }
                b'e' => {
                    let items = self.pop_mark(at)?;
                    self.append(items, at)?;
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.global(module, name)?;
                }
                0x93 => {
                    let name = self.pop(at)?;
                    let module = self.pop(at)?;
                    let (Value::Str(module), Value::Str(name)) = (module, name) else {
                        return Err(malformed(at, "STACK_GLOBAL's module and name are not strings"));
                    };
                    self.global(&module, &name)?;
                }
                b'Q' => {
                    let pid = self.pop(at)?;
                    let v = persistent(&pid).ok_or_else(|| {
                        malformed(at, "a persistent id is not ('storage', <storage type>, key, location, numel)")
                    })?;
                    self.stack.push(v);
                }
                b'R' => {
                    let args = self.pop(at)?;
                    let callable = self.pop(at)?;
                    let v = reduce(&callable, &args).ok_or_else(|| match callable {
                        Value::Global(g) => {
                            malformed(at, &format!("REDUCE of {g:?} has arguments that are not a tensor's"))
                        }
                        _ => malformed(at, "REDUCE of a value that is not an allowed global"),
                    })?;
                    self.stack.push(v);
                }
                b'b' => {
                    // BUILD: the state of an OrderedDict (its `_metadata`) or of a tensor (its
                    // Python attributes); neither matters to the weights.
                    self.pop(at)?;
                    match self.top(at)? {
                        Value::Dict(_) | Value::Tensor(_) => {}
                        _ => return Err(malformed(at, "BUILD of a value that is not a dict or a tensor")),
                    }
                }
                other => return Err(PickleError::UnknownOpcode { opcode: other, at }),
            }
        }
    }
}

fn malformed(at: usize, why: &str) -> PickleError {
    PickleError::Malformed { at, why: why.to_owned() }
}

fn same_key(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Str(x), Value::Str(y)) => x == y,
        (Value::Int(x), Value::Int(y)) => x == y,
        _ => false,
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
        Value::Tuple(t) => t.iter().map(usize_of).collect(),
        _ => None,
    }
}

/// `('storage', <storage type>, key, location, numel)`, the persistent id `torch.save` writes.
fn persistent(pid: &Value) -> Option<Value> {
    let Value::Tuple(t) = pid else { return None };
    match t.as_slice() {
        [Value::Str(kind), Value::Global(Global::Storage(dtype)), Value::Str(key), Value::Str(_), Value::Int(_)]
            if kind == "storage" =>
        {
            Some(Value::Storage { dtype: *dtype, key: key.clone() })
        }
        _ => None,
    }
}

/// What `REDUCE` of an allowed global builds, without calling anything.
fn reduce(callable: &Value, args: &Value) -> Option<Value> {
    let (Value::Global(g), Value::Tuple(args)) = (callable, args) else { return None };
    match (g, args.as_slice()) {
        (Global::OrderedDict, []) => Some(Value::Dict(Rc::default())),
        // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
        (Global::RebuildTensor, [Value::Storage { dtype, key }, offset, size, stride, _, _, ..]) if args.len() <= 7 => {
            let (offset, shape, stride) = (usize_of(offset)?, usizes(size)?, usizes(stride)?);
            (shape.len() == stride.len()).then(|| {
                Value::Tensor(Rc::new(TensorRecord { key: key.clone(), dtype: *dtype, offset, shape, stride }))
            })
        }
        // (data, requires_grad, backward_hooks)
        (Global::RebuildParameter, [t @ Value::Tensor(_), _, _]) => Some(t.clone()),
        _ => None,
    }
}
