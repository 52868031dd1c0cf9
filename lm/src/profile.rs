//! Per-phase times of a training step, for `fusegrpo bench step --phases`:
//! off unless [`start`] switched it on for the calling thread, when every
//! marked op costs one atomic-free thread-local check and nothing else.
//!
//! On, each marked op ([`op`]) synchronizes the device (CUDA queues its work
//! and returns at once) before and after it runs, and charges the time since
//! the last such event to the phase that was running. The backward pass,
//! one autograd `backward()` over many ops, is split the same way: the op's
//! inputs and output pass through an identity node ([`Mark`]) whose
//! backward synchronizes and switches the phase. Candle walks the graph in
//! reverse depth-first order, so an op's nodes run between the backward of
//! its output's mark (the phase opens) and the first of its inputs' marks
//! (it closes). Time in no marked op (embedding, residual adds, head
//! transposes and their copies, the loss, gradient bookkeeping) is
//! [`Phase::Other`]; the marks' own copies are left out of every phase
//! ([`Profile::excluded_seconds`]), so the phases sum to the profiled time
//! less that.

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::{CpuStorage, CustomOp1, Device, Layout, Result, Shape, Tensor};
use std::cell::RefCell;
use std::time::Instant;

/// What a slice of a step's time was spent on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The attention op (scores, softmax, values; forward and backward).
    Attention,
    /// The projections: q, k, v, o, and the gate/up (with the SwiGLU gate
    /// fused into that node) and down products, LoRA deltas included.
    Matmul,
    /// The log-prob head: `hidden @ lm_head^T`, log-softmax, the targets'
    /// log-probs (and the gradient folded into it).
    LogprobHead,
    /// RMSNorms and rotary embeddings.
    NormRopeElementwise,
    /// The optimizer's step.
    Optimizer,
    /// Everything else (see the module's documentation).
    Other,
}

impl Phase {
    /// Every phase, in the order reports print them.
    pub const ALL: [Phase; 6] = [Phase::Attention, Phase::Matmul, Phase::LogprobHead, Phase::NormRopeElementwise, Phase::Optimizer, Phase::Other];

    /// The phase's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Attention => "attention",
            Phase::Matmul => "matmul",
            Phase::LogprobHead => "logprob_head",
            Phase::NormRopeElementwise => "norm_rope_elementwise",
            Phase::Optimizer => "optimizer",
            Phase::Other => "other",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Seconds per phase between [`start`] and [`finish`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Profile {
    /// Seconds by [`Phase::index`] (the order of [`Phase::ALL`]).
    pub seconds: [f64; 6],
    /// Time left out of every phase: the marks' copies.
    pub excluded_seconds: f64,
    /// Phase switches seen (forward and backward).
    pub events: usize,
}

impl Profile {
    /// The seconds charged to `phase`.
    pub fn get(&self, phase: Phase) -> f64 {
        self.seconds[phase.index()]
    }

    /// The sum over the phases.
    pub fn total(&self) -> f64 {
        self.seconds.iter().sum()
    }
}

struct State {
    device: Device,
    current: Phase,
    /// Phases interrupted by the open ones (ops do not nest; kept for safety).
    stack: Vec<Phase>,
    last: Instant,
    profile: Profile,
}

impl State {
    fn open(&mut self, phase: Phase) {
        self.stack.push(self.current);
        self.current = phase;
    }

    /// Closes `phase` if it is the running one (an op's second and third
    /// input marks find it closed already).
    fn close(&mut self, phase: Phase) {
        if self.current == phase {
            self.current = self.stack.pop().unwrap_or(Phase::Other);
        }
    }
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

/// Whether this thread is profiling.
pub fn is_on() -> bool {
    STATE.with(|s| s.borrow().is_some())
}

/// Starts profiling this thread's work on `device` (after synchronizing
/// it); a profile already running is dropped.
pub fn start(device: &Device) -> Result<()> {
    device.synchronize()?;
    let state = State { device: device.clone(), current: Phase::Other, stack: Vec::new(), last: Instant::now(), profile: Profile::default() };
    STATE.with(|s| *s.borrow_mut() = Some(state));
    Ok(())
}

/// Stops profiling (after synchronizing the device) and returns the
/// profile; `None` if none was running.
pub fn finish() -> Result<Option<Profile>> {
    let Some(device) = STATE.with(|s| s.borrow().as_ref().map(|st| st.device.clone())) else { return Ok(None) };
    event(&device, |_| ())?;
    Ok(STATE.with(|s| s.borrow_mut().take()).map(|st| st.profile))
}

/// Synchronizes `device`, charges the time since the last event to the
/// running phase, then applies `change`. Nothing when off.
fn event(device: &Device, change: impl FnOnce(&mut State)) -> Result<()> {
    if !is_on() {
        return Ok(());
    }
    device.synchronize()?;
    let now = Instant::now();
    STATE.with(|s| {
        if let Some(st) = s.borrow_mut().as_mut() {
            st.profile.seconds[st.current.index()] += now.duration_since(st.last).as_secs_f64();
            st.profile.events += 1;
            st.last = now;
            change(st);
        }
    });
    Ok(())
}

/// Runs `f` (the marks' copies) outside every phase: the device is
/// synchronized before and after, and the time between is excluded.
fn excluded<T>(device: &Device, f: impl FnOnce() -> Result<T>) -> Result<T> {
    event(device, |_| ())?;
    let out = f()?;
    device.synchronize()?;
    let now = Instant::now();
    STATE.with(|s| {
        if let Some(st) = s.borrow_mut().as_mut() {
            st.profile.excluded_seconds += now.duration_since(st.last).as_secs_f64();
            st.last = now;
        }
    });
    Ok(out)
}

/// Runs `f` as `phase` when profiling (forward only: for work outside the
/// autograd graph, such as the optimizer's step); just `f` otherwise.
pub fn region<T, E: From<candle_core::Error>>(phase: Phase, device: &Device, f: impl FnOnce() -> std::result::Result<T, E>) -> std::result::Result<T, E> {
    if !is_on() {
        return f();
    }
    event(device, |s| s.open(phase))?;
    let out = f()?;
    event(device, |s| s.close(phase))?;
    Ok(out)
}

/// `f(inputs)`, the op of `phase`: when profiling, timed as `phase` in the
/// forward pass, and its inputs and output marked so that its backward is
/// timed as `phase` too. Without profiling, just `f(inputs)`.
pub fn op<const N: usize>(phase: Phase, inputs: [&Tensor; N], f: impl FnOnce([Tensor; N]) -> Result<Tensor>) -> Result<Tensor> {
    op_then(phase, inputs, f, |y, mark| mark(&y))
}

/// [`op`] for an op with several outputs `T`: `outputs` marks (with the
/// function it is given) those that gradients flow back through.
pub fn op_then<const N: usize, T>(
    phase: Phase,
    inputs: [&Tensor; N],
    f: impl FnOnce([Tensor; N]) -> Result<T>,
    outputs: impl FnOnce(T, &dyn Fn(&Tensor) -> Result<Tensor>) -> Result<T>,
) -> Result<T> {
    if !is_on() || N == 0 {
        return f(inputs.map(Tensor::clone));
    }
    let device = inputs[0].device().clone();
    let marked: Vec<Tensor> = excluded(&device, || inputs.iter().map(|t| mark(t, phase, Edge::Enter)).collect())?;
    let marked: [Tensor; N] = marked.try_into().map_err(|_| candle_core::Error::Msg("profile: input count".into()))?;
    event(&device, |s| s.open(phase))?;
    let y = f(marked)?;
    event(&device, |s| s.close(phase))?;
    excluded(&device, || outputs(y, &|t| mark(t, phase, Edge::Exit)))
}

/// Which side of an op a [`Mark`] is on.
#[derive(Clone, Copy, Debug)]
enum Edge {
    /// An input: its backward runs after the op's (the phase closes).
    Enter,
    /// The output: its backward runs before the op's (the phase opens).
    Exit,
}

/// An identity node whose backward switches the profile's phase. Only a
/// tensor that takes part in a gradient gets one (others have no backward).
fn mark(t: &Tensor, phase: Phase, edge: Edge) -> Result<Tensor> {
    if !t.track_op() {
        return Ok(t.clone());
    }
    t.apply_op1(Mark { phase, edge })
}

/// See [`mark`].
struct Mark {
    phase: Phase,
    edge: Edge,
}

/// A contiguous copy of the storage under `l`.
fn copy<S: BackendStorage>(s: &S, l: &Layout) -> Result<(S, Shape)>
where
    S::Device: BackendDevice<Storage = S>,
{
    // SAFETY: every element is written by the copy below.
    let mut out = unsafe { s.device().alloc_uninit(l.shape(), s.dtype())? };
    s.copy_strided_src(&mut out, 0, l)?;
    Ok((out, l.shape().clone()))
}

impl CustomOp1 for Mark {
    fn name(&self) -> &'static str {
        "profile-mark"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        copy(s, l)
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s: &candle_core::CudaStorage, l: &Layout) -> Result<(candle_core::CudaStorage, Shape)> {
        copy(s, l)
    }

    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        event(grad.device(), |s| match self.edge {
            Edge::Exit => s.open(self.phase),
            Edge::Enter => s.close(self.phase),
        })?;
        Ok(Some(grad.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Var};

    /// Busy work of about `ms` milliseconds on the CPU, as a tensor op.
    fn spin(x: &Tensor, ms: u64) -> Result<Tensor> {
        let t0 = Instant::now();
        while t0.elapsed().as_millis() < ms as u128 {
            std::hint::spin_loop();
        }
        x.affine(2.0, 0.0)
    }

    /// A slow op in the forward is charged to its phase, and so is the
    /// backward of an op whose backward is slow (a custom op that sleeps);
    /// the rest goes to `other`; off, nothing is recorded and nothing marked.
    #[test]
    fn forward_and_backward_are_charged_to_their_phases() {
        struct SlowBackward;
        impl CustomOp1 for SlowBackward {
            fn name(&self) -> &'static str {
                "slow-backward"
            }
            fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
                copy(s, l)
            }
            fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
                std::thread::sleep(std::time::Duration::from_millis(60));
                Ok(Some(grad.clone()))
            }
        }
        let dev = Device::Cpu;
        let x = Var::from_tensor(&Tensor::ones(4, DType::F32, &dev).unwrap()).unwrap();
        // Off: the op is just the function, and no profile exists.
        op(Phase::Matmul, [x.as_tensor()], |[x]| x.affine(1.0, 0.0)).unwrap();
        assert_eq!(finish().unwrap(), None);

        start(&dev).unwrap();
        let a = op(Phase::Attention, [x.as_tensor()], |[x]| spin(&x, 40)).unwrap();
        let b = op(Phase::Matmul, [&a], |[a]| a.apply_op1(SlowBackward)).unwrap();
        let other = spin(&b, 30).unwrap();
        region(Phase::Optimizer, &dev, || -> Result<()> {
            std::thread::sleep(std::time::Duration::from_millis(20));
            Ok(())
        })
        .unwrap();
        let grads = other.sum_all().unwrap().backward().unwrap();
        let p = finish().unwrap().expect("a profile");
        assert!(!is_on());
        assert_eq!(grads.get(x.as_tensor()).unwrap().to_vec1::<f32>().unwrap(), vec![4.0; 4]);
        let s = |ph| p.get(ph);
        // Lower bounds only: a loaded machine stretches every interval.
        assert!(s(Phase::Attention) >= 0.040, "{p:?}");
        assert!(s(Phase::Matmul) >= 0.060, "the backward's sleep (its forward is one copy): {p:?}");
        assert!(s(Phase::Other) >= 0.030, "{p:?}");
        assert!(s(Phase::Optimizer) >= 0.020, "{p:?}");
        assert_eq!(s(Phase::LogprobHead), 0.0);
        assert_eq!(s(Phase::NormRopeElementwise), 0.0);
        // 2 ops x (open, close) forward, 2 x (open, close) backward, the region's 2, the marks' copies' 4, finish.
        assert!(p.events >= 10, "{p:?}");
    }
}
