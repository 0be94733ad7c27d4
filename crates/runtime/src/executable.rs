//! The executable of a plan: the flat list of what its replay launches, lowered once per plan
//! and device.
//!
//! A plan says what to run in terms of the graph it was scheduled from (steps naming fused
//! groups, library matmuls, memory slots). Its executable resolves all of that once: each
//! launch carries its bindings (a tensor of the replayed graph, named by the op and position
//! that read or write it, or a slot of the replay's buffer) and its scalars as indices into a
//! per-replay scalar table. A replay then only fills the table from the recorded ops and walks
//! the list: no step lookups, no memory-plan lookups, no scalar extraction per launch.
//!
//! Scalars are never frozen into an executable: a recorded scalar (a learning rate, Adam's bias
//! corrections) may change from one replay of the same graph to the next, so the table is
//! refilled from each replay's own ops.

use burn_compile_graph::{Activation, op_name};
use burn_compile_schedule::{Plan, Slot, Step, scalar_operand, scale_alpha};
use burn_ir::OperationIr;
use std::fmt;

/// Where an entry of the per-replay scalar table comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScalarSource {
    /// The scalar operand of op `op` (a fused kernel's scalar argument).
    Operand(u32),
    /// The factor of scale op `op` (`x * s`: `s`; `x / s`: `1 / s`): a library matmul's α.
    Scale(u32),
}

/// A tensor a launch reads or writes in the replayed graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// Input `pos` of op `op` (a graph input, or what an earlier launch wrote).
    Read(Slot),
    /// Output `pos` of op `op`: into slot `slab` of the replay's buffer (the memory plan), or
    /// allocated on its own.
    Write { at: Slot, slab: Option<u32> },
}

/// One entry of an executable, in replay order.
#[derive(Clone, Debug, PartialEq)]
pub enum Launch {
    /// Op `op` on the inner backend.
    Eager { op: u32 },
    /// Activation op `op` with the inner backend's own kernel.
    Activation { op: u32, kind: Activation },
    /// Fused group `group`'s generated kernel, over `bindings` (its inputs, then its outputs)
    /// with the scalars `scalars` (a range of the table); then what it consumed and its drops are
    /// freed.
    Kernel {
        group: u32,
        bindings: Vec<Binding>,
        scalars: (u32, u32),
    },
    /// Horizontal group `group`: its members' kernels (each a [`Launch::Kernel`]) as one
    /// launch where the target takes it, else one by one.
    Horizontal { group: u32, kernels: Vec<Launch> },
    /// Library matmul group `group` (cuBLASLt): its operands, its residual, its output (then a
    /// fused bias gradient's), and α (an index in the scalar table; none: 1).
    Matmul {
        group: u32,
        bindings: Vec<Binding>,
        alpha: Option<u32>,
    },
    /// Attention group `group`: q, k, v and the output.
    Attention { group: u32, bindings: Vec<Binding> },
    /// Column group `group`: the first sum's input and the last sum's output.
    Column { group: u32, bindings: Vec<Binding> },
    /// Horizontal column group `group`: its members' column sums (each a [`Launch::Column`])
    /// as one launch where the target takes it, else one by one.
    HorizontalColumns { group: u32, columns: Vec<Launch> },
    /// Frees the inputs of dead op `op` at `inputs` (positions).
    Release { op: u32, inputs: Vec<u8> },
    /// Op `op`'s outputs share op `of`'s; then its consumed inputs at `inputs` are freed.
    Alias { op: u32, of: u32, inputs: Vec<u8> },
}

/// A plan lowered for replay.
#[derive(Clone, Debug, PartialEq)]
pub struct Executable {
    pub launches: Vec<Launch>,
    /// The per-replay scalar table, by source.
    pub scalars: Vec<ScalarSource>,
    /// Bytes of each slot of the replay's buffer.
    pub slab: Vec<u64>,
    /// Op names, for listings and the replay profile (`op_name` of each op the launches run
    /// eagerly, by op).
    names: Vec<(u32, String)>,
}

/// The launch of fused group `group`, its scalars appended to the table.
fn kernel_launch(plan: &Plan, group: u32, scalars: &mut Vec<ScalarSource>) -> Launch {
    let g = &plan.fused[group as usize];
    let slots = plan.memory.fused.get(group as usize);
    let start = scalars.len() as u32;
    scalars.extend(g.scalars.iter().map(|op| ScalarSource::Operand(*op)));
    let bindings = g
        .inputs
        .iter()
        .map(|s| Binding::Read(*s))
        .chain(g.outputs.iter().enumerate().map(|(o, at)| Binding::Write {
            at: *at,
            slab: slots.and_then(|s| s.get(o).copied().flatten()),
        }))
        .collect();
    Launch::Kernel {
        group,
        bindings,
        scalars: (start, g.scalars.len() as u32),
    }
}

/// The launch of column group `group`: its input and its output.
fn column_launch(plan: &Plan, group: u32) -> Launch {
    let g = &plan.column[group as usize];
    Launch::Column {
        group,
        bindings: vec![
            Binding::Read(g.input),
            Binding::Write {
                at: g.output,
                slab: None,
            },
        ],
    }
}

impl Executable {
    /// Lowers `plan`, scheduled from a graph of `ops` (any replay's ops: they have the plan's
    /// structure).
    pub fn lower(plan: &Plan, ops: &[OperationIr]) -> Self {
        let mut scalars = Vec::new();
        let mut names = Vec::new();
        let read = |op: u32, pos: u8| Binding::Read(Slot { op, pos });
        let launches = plan
            .steps
            .iter()
            .map(|step| match step {
                Step::Eager { op } => {
                    names.push((*op, op_name(&ops[*op as usize])));
                    Launch::Eager { op: *op }
                }
                Step::Activation { op, kind } => {
                    names.push((*op, op_name(&ops[*op as usize])));
                    Launch::Activation {
                        op: *op,
                        kind: *kind,
                    }
                }
                Step::Fused { group } => kernel_launch(plan, *group, &mut scalars),
                Step::Horizontal { group } => Launch::Horizontal {
                    group: *group,
                    kernels: plan.horizontal[*group as usize]
                        .members
                        .iter()
                        .map(|m| kernel_launch(plan, *m, &mut scalars))
                        .collect(),
                },
                Step::Matmul { group } => {
                    let g = &plan.matmul[*group as usize];
                    let operands = ops[g.op as usize].inputs().count() as u8;
                    let alpha = g.scale.map(|op| {
                        scalars.push(ScalarSource::Scale(op));
                        scalars.len() as u32 - 1
                    });
                    let bindings = (0..operands)
                        .map(|pos| read(g.op, pos))
                        .chain(g.residual.map(|r| read(r.op, r.input)))
                        .chain(std::iter::once(Binding::Write {
                            at: Slot {
                                op: g.output_op(),
                                pos: 0,
                            },
                            slab: plan.memory.matmul.get(*group as usize).copied().flatten(),
                        }))
                        // A fused bias gradient: the call's second output, on its own.
                        .chain(g.bias_grad.map(|op| Binding::Write {
                            at: Slot { op, pos: 0 },
                            slab: None,
                        }))
                        .collect();
                    Launch::Matmul {
                        group: *group,
                        bindings,
                        alpha,
                    }
                }
                Step::Attention { group } => {
                    let g = &plan.attention[*group as usize];
                    let bindings = vec![
                        read(g.scores, 0),
                        read(g.transpose, 0),
                        read(g.context, 1),
                        Binding::Write {
                            at: Slot {
                                op: g.context,
                                pos: 0,
                            },
                            slab: None,
                        },
                    ];
                    Launch::Attention {
                        group: *group,
                        bindings,
                    }
                }
                Step::Column { group } => column_launch(plan, *group),
                Step::HorizontalColumns { group } => Launch::HorizontalColumns {
                    group: *group,
                    columns: plan.horizontal_columns[*group as usize]
                        .members
                        .iter()
                        .map(|m| column_launch(plan, *m))
                        .collect(),
                },
                Step::Release { op, inputs } => Launch::Release {
                    op: *op,
                    inputs: inputs.clone(),
                },
                Step::Alias { op, of, inputs } => Launch::Alias {
                    op: *op,
                    of: *of,
                    inputs: inputs.clone(),
                },
            })
            .collect();
        Self {
            launches,
            scalars,
            slab: plan.memory.slots.clone(),
            names,
        }
    }

    /// The scalar table of a replay of `ops`, in [`Executable::scalars`] order.
    pub fn scalar_table(&self, ops: &[OperationIr]) -> Vec<f64> {
        self.scalars
            .iter()
            .map(|source| match *source {
                ScalarSource::Operand(op) => {
                    scalar_operand(&ops[op as usize]).expect("lowered from a scalar operation")
                }
                ScalarSource::Scale(op) => {
                    scale_alpha(&ops[op as usize]).expect("lowered from a scale operation")
                }
            })
            .collect()
    }

    /// Launches that run work on the inner backend (frees and aliases run none).
    pub fn work(&self) -> usize {
        self.launches
            .iter()
            .filter(|l| !matches!(l, Launch::Release { .. } | Launch::Alias { .. }))
            .count()
    }

    /// The ops this executable runs on the inner backend (its eager and activation launches:
    /// those `names` holds), by name with their counts, most frequent first: what the fusers
    /// and the libraries left to the inner backend's own kernels.
    pub fn eager_ops(&self) -> Vec<(String, usize)> {
        tally(self.names.iter().map(|(_, name)| (name.as_str(), 1)))
    }

    /// The name of op `op`, where a launch runs it eagerly.
    pub fn op_name(&self, op: u32) -> &str {
        self.names
            .iter()
            .find(|(o, _)| *o == op)
            .map_or("op", |(_, name)| name.as_str())
    }
}

/// Counts by name summed, most frequent first, then by name.
pub fn tally<'a>(counts: impl IntoIterator<Item = (&'a str, usize)>) -> Vec<(String, usize)> {
    let mut sums: std::collections::BTreeMap<&str, usize> = Default::default();
    for (name, n) in counts {
        *sums.entry(name).or_default() += n;
    }
    let mut sums: Vec<(String, usize)> =
        sums.into_iter().map(|(k, n)| (k.to_string(), n)).collect();
    sums.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    sums
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Binding::Read(s) => write!(f, "op{}.in{}", s.op, s.pos),
            Binding::Write { at, slab: None } => write!(f, "op{}.out{}", at.op, at.pos),
            Binding::Write {
                at,
                slab: Some(slot),
            } => write!(f, "op{}.out{}@slab{slot}", at.op, at.pos),
        }
    }
}

/// `a, b -> c`: the reads, then the writes.
fn bindings(f: &mut fmt::Formatter<'_>, bindings: &[Binding]) -> fmt::Result {
    let (reads, writes): (Vec<_>, Vec<_>) =
        bindings.iter().partition(|b| matches!(b, Binding::Read(_)));
    let list = |bs: Vec<&Binding>| {
        bs.iter()
            .map(|b| b.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    write!(f, "({}) -> {}", list(reads), list(writes))
}

fn positions(op: u32, inputs: &[u8]) -> String {
    inputs
        .iter()
        .map(|p| format!("op{op}.in{p}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Executable {
    /// Launch `i` as one line of the listing (without its number).
    pub fn line(&self, i: usize) -> String {
        struct Line<'a>(&'a Executable, &'a Launch);
        impl fmt::Display for Line<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt_launch(f, self.1)
            }
        }
        match self.launches.get(i) {
            Some(launch) => Line(self, launch).to_string(),
            None => format!("launch {i} (past the end)"),
        }
    }

    fn fmt_launch(&self, f: &mut fmt::Formatter<'_>, launch: &Launch) -> fmt::Result {
        match launch {
            Launch::Eager { op } => write!(f, "eager {} op{op}", self.op_name(*op))?,
            Launch::Activation { op, kind } => {
                write!(f, "activation {kind:?} op{op}")?;
            }
            Launch::Kernel {
                group,
                bindings: b,
                scalars: (start, len),
            } => {
                write!(f, "kernel {group} ")?;
                bindings(f, b)?;
                if *len > 0 {
                    write!(f, " scalars s{start}..s{}", start + len)?;
                }
            }
            Launch::Horizontal { group, kernels } => {
                write!(f, "horizontal {group} of {} kernels:", kernels.len())?;
                for kernel in kernels {
                    write!(f, "\n        ")?;
                    self.fmt_launch(f, kernel)?;
                }
            }
            Launch::Matmul {
                group,
                bindings: b,
                alpha,
            } => {
                write!(f, "library matmul {group} ")?;
                bindings(f, b)?;
                if let Some(a) = alpha {
                    write!(f, " alpha s{a}")?;
                }
            }
            Launch::Attention { group, bindings: b } => {
                write!(f, "attention {group} ")?;
                bindings(f, b)?;
            }
            Launch::Column { group, bindings: b } => {
                write!(f, "column sum {group} ")?;
                bindings(f, b)?;
            }
            Launch::HorizontalColumns { group, columns } => {
                write!(
                    f,
                    "horizontal column sums {group} of {} sums:",
                    columns.len()
                )?;
                for column in columns {
                    write!(f, "\n        ")?;
                    self.fmt_launch(f, column)?;
                }
            }
            Launch::Release { op, inputs } => write!(f, "free {}", positions(*op, inputs))?,
            Launch::Alias { op, of, inputs } => {
                write!(f, "alias op{op} = op{of}")?;
                if !inputs.is_empty() {
                    write!(f, "; free {}", positions(*op, inputs))?;
                }
            }
        }
        Ok(())
    }
}

impl fmt::Display for Executable {
    /// One line per launch; then the scalar table and the replay's buffer.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, launch) in self.launches.iter().enumerate() {
            write!(f, "{i:>4}  ")?;
            self.fmt_launch(f, launch)?;
            writeln!(f)?;
        }
        if !self.scalars.is_empty() {
            let table: Vec<String> = self
                .scalars
                .iter()
                .enumerate()
                .map(|(i, s)| match s {
                    ScalarSource::Operand(op) => format!("s{i} = op{op}.scalar"),
                    ScalarSource::Scale(op) => format!("s{i} = op{op}.scale"),
                })
                .collect();
            writeln!(f, "scalars: {}", table.join(", "))?;
        }
        if !self.slab.is_empty() {
            writeln!(f, "slab: {:?} bytes", self.slab)?;
        }
        Ok(())
    }
}
