//! The pickle machine of `data.pkl`: the opcodes `torch.save` writes for a state dict (pickle
//! protocol 2, and the few of protocols 3 to 5 a newer pickler may add), and nothing that runs
//! code. A global is a name checked against an allow-list and kept as a tag; `REDUCE` of
//! `_rebuild_tensor_v2` records a tensor (its storage, offset, shape and stride), `BINPERSID`
//! records a storage of the archive, and no other call is made or can be.
//!
//! It is linear in the pickle: every opcode does work in proportion to the bytes it reads or
//! the items it moves, strings are interned (so a memoized one is never copied, and a dict key
//! is found by one hash of a pointer), and it builds at most [`MAX_VALUES`] values, nested at
//! most [`MAX_DEPTH`] deep.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

pub(crate) use super::values::PickleError;
use super::values::{self, Global, MAX_DEPTH, Value};

/// The most values a pickle may build (each push on the stack and each memo entry; a state
/// dict builds about 30 a tensor, so 8,000,000 is more than 250,000 tensors).
pub(crate) const MAX_VALUES: usize = 8_000_000;

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: HashMap<u32, Value>,
    /// Every string read, once.
    strings: HashSet<Rc<str>>,
    /// Values built so far (pushes and memo entries).
    built: usize,
}

/// Runs the pickle `data` to its `STOP` and returns the value it built.
pub(crate) fn load(data: &[u8]) -> Result<Value, PickleError> {
    let mut m = Machine {
        data,
        pos: 0,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
        strings: HashSet::new(),
        built: 0,
    };
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
    /// `s` as the pickle's one `Rc` of it.
    fn intern(&mut self, s: &str) -> Rc<str> {
        if let Some(r) = self.strings.get(s) {
            return r.clone();
        }
        let r: Rc<str> = Rc::from(s);
        self.strings.insert(r.clone());
        r
    }
    fn text(&mut self, n: usize, at: usize) -> Result<Value, PickleError> {
        let bytes = self.take(n)?;
        let s = std::str::from_utf8(bytes).map_err(|_| malformed(at, "a string is not UTF-8"))?;
        Ok(Value::Str(self.intern(s)))
    }
    /// Counts one more value built.
    fn count(&mut self, at: usize) -> Result<(), PickleError> {
        self.built += 1;
        if self.built > MAX_VALUES {
            return Err(PickleError::TooMany { at });
        }
        Ok(())
    }
    fn push(&mut self, v: Value, at: usize) -> Result<(), PickleError> {
        self.count(at)?;
        self.stack.push(v);
        Ok(())
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
        self.count(at)?;
        self.memo.insert(key, v);
        Ok(())
    }
    fn memo_get(&mut self, key: u32, at: usize) -> Result<(), PickleError> {
        let v = self
            .memo
            .get(&key)
            .cloned()
            .ok_or_else(|| malformed(at, &format!("memo {key} is read before it is written")))?;
        self.push(v, at)
    }
    fn global(&mut self, module: &str, name: &str, at: usize) -> Result<(), PickleError> {
        let g = Global::find(module, name).ok_or_else(|| PickleError::Global { name: format!("{module}.{name}") })?;
        self.push(Value::Global(g), at)
    }
    fn set_items(&mut self, items: Vec<Value>, at: usize) -> Result<(), PickleError> {
        if !items.len().is_multiple_of(2) {
            return Err(malformed(at, "SETITEMS has a key without a value"));
        }
        let Value::Dict(d) = self.top(at)? else { return Err(malformed(at, "SETITEMS on a value that is not a dict")) };
        values::set_items(&d.clone(), items, at)
    }
    fn append(&mut self, items: Vec<Value>, at: usize) -> Result<(), PickleError> {
        let Value::List(l) = self.top(at)? else { return Err(malformed(at, "APPEND on a value that is not a list")) };
        values::append(&l.clone(), items, at)
    }
    fn tuple(&mut self, items: Vec<Value>, at: usize) -> Result<(), PickleError> {
        let t = Value::tuple(items, at)?;
        self.push(t, at)
    }

    fn run(&mut self) -> Result<Value, PickleError> {
        loop {
            let at = self.pos;
            let op = self.u8()?;
            if op == b'.' {
                return self.pop(at);
            }
            if !self.scalar(op, at)? && !self.structure(op, at)? {
                return Err(PickleError::UnknownOpcode { opcode: op, at });
            }
        }
    }

    /// The opcodes of numbers, strings and framing; false for any other.
    fn scalar(&mut self, op: u8, at: usize) -> Result<bool, PickleError> {
        match op {
            0x80 => {
                // PROTO
                self.u8()?;
            }
            0x95 => {
                // FRAME: a length hint only.
                self.take(8)?;
            }
            b'X' => {
                let n = u64::from(u32::from_le_bytes(self.le()?));
                let n = self.len(n, at)?;
                let v = self.text(n, at)?;
                self.push(v, at)?;
            }
            0x8c => {
                let n = usize::from(self.u8()?);
                let v = self.text(n, at)?;
                self.push(v, at)?;
            }
            0x8d => {
                let n = u64::from_le_bytes(self.le()?);
                let n = self.len(n, at)?;
                let v = self.text(n, at)?;
                self.push(v, at)?;
            }
            b'U' | b'T' => {
                // SHORT_BINSTRING, BINSTRING: Python 2's byte strings, read as Latin-1.
                let n = if op == b'U' { u64::from(self.u8()?) } else { u64::from(u32::from_le_bytes(self.le()?)) };
                let n = self.len(n, at)?;
                let s: String = self.take(n)?.iter().map(|&b| char::from(b)).collect();
                let s = self.intern(&s);
                self.push(Value::Str(s), at)?;
            }
            b'J' => {
                let v = i32::from_le_bytes(self.le()?);
                self.push(Value::Int(i64::from(v)), at)?;
            }
            b'K' => {
                let v = self.u8()?;
                self.push(Value::Int(i64::from(v)), at)?;
            }
            b'M' => {
                let v = u16::from_le_bytes(self.le()?);
                self.push(Value::Int(i64::from(v)), at)?;
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
                self.push(Value::Int(i64::from_le_bytes(a)), at)?;
            }
            b'G' => {
                self.take(8)?;
                self.push(Value::Float, at)?;
            }
            0x88 | 0x89 => self.push(Value::Bool, at)?,
            b'N' => self.push(Value::None, at)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The opcodes of containers, the memo, globals and calls; false for any other.
    fn structure(&mut self, op: u8, at: usize) -> Result<bool, PickleError> {
        match op {
            b'}' => self.push(Value::empty_dict(), at)?,
            b']' => self.push(Value::empty_list(), at)?,
            b')' => self.tuple(Vec::new(), at)?,
            b'(' => {
                if self.marks.len() >= MAX_DEPTH {
                    return Err(PickleError::TooDeep { at });
                }
                self.marks.push(self.stack.len());
            }
            b't' => {
                let items = self.pop_mark(at)?;
                self.tuple(items, at)?;
            }
            0x85..=0x87 => {
                let n = usize::from(op - 0x84);
                if self.stack.len() < n {
                    return Err(malformed(at, "TUPLE takes more items than the stack holds"));
                }
                let items = self.stack.split_off(self.stack.len() - n);
                self.tuple(items, at)?;
            }
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
            _ => return self.call(op, at),
        }
        Ok(true)
    }

    /// The opcodes of globals, persistent ids, `REDUCE` and `BUILD`; false for any other.
    fn call(&mut self, op: u8, at: usize) -> Result<bool, PickleError> {
        match op {
            b'c' => {
                let module = self.line()?;
                let name = self.line()?;
                self.global(module, name, at)?;
            }
            0x93 => {
                let name = self.pop(at)?;
                let module = self.pop(at)?;
                let (Value::Str(module), Value::Str(name)) = (module, name) else {
                    return Err(malformed(at, "STACK_GLOBAL's module and name are not strings"));
                };
                self.global(&module, &name, at)?;
            }
            b'Q' => {
                let pid = self.pop(at)?;
                let v = values::persistent(&pid).ok_or_else(|| {
                    malformed(at, "a persistent id is not ('storage', <storage type>, key, location, numel)")
                })?;
                self.push(v, at)?;
            }
            b'R' => {
                let args = self.pop(at)?;
                let callable = self.pop(at)?;
                let v = values::reduce(&callable, &args, at)?;
                self.push(v, at)?;
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
            _ => return Ok(false),
        }
        Ok(true)
    }
}

fn malformed(at: usize, why: &str) -> PickleError {
    PickleError::Malformed { at, why: why.to_owned() }
}
