//! The threads a product is split across: the calling thread and
//! `threads − 1` workers that spin briefly between jobs.
//!
//! A decode step of a small model runs a couple of hundred products of a
//! few hundred microseconds each, with a few microseconds of other work in
//! between. rayon's workers fall asleep in those gaps and are woken by a
//! futex each time: on SmolLM2-135M that was about 18% of decode time in
//! system calls (`perf record` on `cargo bench -p vauban --bench model`).
//! Here a worker spins for a short while after a job (yielding its core to
//! any other runnable thread), and only then sleeps on a condition
//! variable, as llama.cpp's thread pool does.

use std::cell::UnsafeCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long an idle worker spins (with `pause`), then yields, before it
/// sleeps until the next job.
const SPIN: Duration = Duration::from_micros(50);
const YIELD: Duration = Duration::from_millis(2);

/// One job: `f(i)` for every `i < tasks`.
#[derive(Clone, Copy)]
struct Job {
    f: *const (dyn Fn(usize) + Sync),
    tasks: usize,
}

struct Shared {
    /// Bumped once per job; a worker runs a job when it sees a new value.
    generation: AtomicU64,
    /// Written by the caller only while every worker has acknowledged the
    /// previous job, read by workers after they see the new generation.
    job: UnsafeCell<Job>,
    next: AtomicUsize,
    /// Workers done with the current job.
    acks: AtomicUsize,
    panicked: AtomicBool,
    sleeping: AtomicUsize,
    sleep: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is written only by the thread holding `Pool::caller`, when
// no worker reads it (every worker has acknowledged the previous job and
// none sees the new one until `generation` is bumped with release order);
// the closure it points to is `Sync` and outlives the job (`run` returns
// only after every worker has acknowledged).
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

/// The process's pool for the kernels.
pub struct Pool {
    shared: Arc<Shared>,
    workers: usize,
    /// One job at a time.
    caller: Mutex<()>,
}

impl Pool {
    /// The pool, started on first use with rayon's thread count (which
    /// honours `RAYON_NUM_THREADS`, as vauban pins it for candle).
    pub fn global() -> &'static Pool {
        static POOL: OnceLock<Pool> = OnceLock::new();
        POOL.get_or_init(|| Pool::new(rayon::current_num_threads().max(1)))
    }

    fn new(threads: usize) -> Pool {
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(0),
            job: UnsafeCell::new(Job {
                f: &|_| {},
                tasks: 0,
            }),
            next: AtomicUsize::new(0),
            acks: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            sleeping: AtomicUsize::new(0),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
        });
        for w in 1..threads {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("vauban-kernels-{w}"))
                .spawn(move || worker(&shared, 0))
                .expect("starting a kernel thread");
        }
        Pool {
            shared,
            workers: threads - 1,
            caller: Mutex::new(()),
        }
    }

    /// Threads a job runs on, the caller included.
    pub fn threads(&self) -> usize {
        self.workers + 1
    }

    /// Copies `src` into `dst` across the pool, in pieces of 256 KiB: a
    /// host copy of a vocabulary's logits at every position (12 MB) is
    /// bound by first touches of fresh pages, which the threads take in
    /// parallel.
    ///
    /// # Panics
    /// If the two differ in length.
    pub fn copy<T: Copy + Send + Sync>(&self, src: &[T], dst: &mut [T]) {
        assert_eq!(
            src.len(),
            dst.len(),
            "a copy between slices of different lengths"
        );
        let piece = ((256 << 10) / std::mem::size_of::<T>().max(1)).max(1);
        let pieces: Vec<std::sync::Mutex<&mut [T]>> =
            dst.chunks_mut(piece).map(std::sync::Mutex::new).collect();
        self.run(pieces.len(), &|t| {
            // Each task locks only its own piece: never contended.
            let mut d = pieces[t].lock().unwrap_or_else(|e| e.into_inner());
            let n = d.len();
            d.copy_from_slice(&src[t * piece..][..n]);
        });
    }

    /// Runs `f(i)` for every `i < tasks` across the pool and the calling
    /// thread; returns when all are done. A panic in any task is raised
    /// here.
    pub fn run(&self, tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        if self.workers == 0 || tasks <= 1 {
            (0..tasks).for_each(f);
            return;
        }
        let _one = self.caller.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        // SAFETY: see `Shared`; the lifetime is erased only for the
        // duration of this call, which waits for every worker below.
        unsafe {
            let f: *const (dyn Fn(usize) + Sync + '_) = f;
            *s.job.get() = Job {
                f: std::mem::transmute::<
                    *const (dyn Fn(usize) + Sync + '_),
                    *const (dyn Fn(usize) + Sync + 'static),
                >(f),
                tasks,
            };
        }
        s.next.store(0, Relaxed);
        s.acks.store(0, Relaxed);
        s.generation.fetch_add(1, SeqCst);
        if s.sleeping.load(SeqCst) > 0 {
            let _g = s.sleep.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| take_tasks(s, f, tasks)));
        let start = Instant::now();
        while s.acks.load(Acquire) < self.workers {
            if start.elapsed() < SPIN {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if s.panicked.swap(false, Relaxed) {
            panic!("a kernel task panicked on a worker thread");
        }
    }
}

fn take_tasks(s: &Shared, f: &(dyn Fn(usize) + Sync), tasks: usize) {
    loop {
        let i = s.next.fetch_add(1, Relaxed);
        if i >= tasks {
            return;
        }
        f(i);
    }
}

/// `seen`: the generation when the worker was spawned (read before it
/// starts, so a job published while it starts is not missed).
fn worker(s: &Shared, mut seen: u64) {
    loop {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let g = s.generation.load(Acquire);
            if g != seen {
                seen = g;
                break;
            }
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(64) {
                std::hint::spin_loop();
                continue;
            }
            let idle = start.elapsed();
            if idle < SPIN {
                std::hint::spin_loop();
            } else if idle < YIELD {
                std::thread::yield_now();
            } else {
                let mut g = s.sleep.lock().unwrap_or_else(|e| e.into_inner());
                s.sleeping.fetch_add(1, SeqCst);
                while s.generation.load(SeqCst) == seen {
                    g = s.wake.wait(g).unwrap_or_else(|e| e.into_inner());
                }
                s.sleeping.fetch_sub(1, SeqCst);
            }
        }
        // SAFETY: the caller wrote the job before bumping the generation,
        // and keeps the closure alive until this worker acknowledges.
        let job = unsafe { *s.job.get() };
        let f = unsafe { &*job.f };
        if catch_unwind(AssertUnwindSafe(|| take_tasks(s, f, job.tasks))).is_err() {
            s.panicked.store(true, Relaxed);
        }
        s.acks.fetch_add(1, Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_once_across_many_jobs() {
        let pool = Pool::new(3);
        for tasks in [0, 1, 2, 5, 64] {
            for _ in 0..200 {
                let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
                pool.run(tasks, &|i| {
                    hits[i].fetch_add(1, Relaxed);
                });
                assert!(hits.iter().all(|h| h.load(Relaxed) == 1));
            }
        }
    }

    #[test]
    fn a_copy_across_the_pool_is_the_source() {
        let pool = Pool::new(2);
        // Pieces of 65,536 f32s: a length that leaves a short last piece,
        // one under a piece, and none.
        for len in [3 * 65_536 + 17, 1000, 0] {
            let src: Vec<f32> = (0..len).map(|i| i as f32 * 0.5).collect();
            let mut dst = vec![f32::NAN; len];
            pool.copy(&src, &mut dst);
            assert_eq!(src, dst);
        }
    }

    #[test]
    fn a_sleeping_worker_wakes_for_the_next_job() {
        let pool = Pool::new(2);
        std::thread::sleep(YIELD * 3);
        let sum = AtomicUsize::new(0);
        pool.run(8, &|i| {
            sum.fetch_add(i, Relaxed);
        });
        assert_eq!(sum.load(Relaxed), 28);
    }

    #[test]
    fn a_panicking_task_is_raised_to_the_caller_and_the_pool_goes_on() {
        let pool = Pool::new(2);
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run(16, &|i| assert!(i != 7, "task seven"));
        }));
        assert!(r.is_err());
        let n = AtomicUsize::new(0);
        pool.run(16, &|_| {
            n.fetch_add(1, Relaxed);
        });
        assert_eq!(n.load(Relaxed), 16);
    }
}
