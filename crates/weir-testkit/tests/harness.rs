//! The harness drives processing-time timers with a manual clock.

use weir_core::time::ProcTime;
use weir_runtime::{Context, Operator, Port, Result, StreamBatch, Timer};
use weir_testkit::{rows, sorted_lines, Harness};

/// Emits each batch 1 s of processing time after it arrived.
struct Delay {
    held: Vec<StreamBatch>,
}

impl Operator for Delay {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let due = ProcTime(ctx.now().0 + 1_000);
        ctx.register_proc_timer(due, b"");
        self.held.push(batch);
        Ok(())
    }
    fn on_timer(&mut self, _timer: Timer, ctx: &mut Context) -> Result<()> {
        for b in self.held.drain(..) {
            ctx.emit(b);
        }
        Ok(())
    }
}

#[test]
fn processing_time_timers_fire_when_the_manual_clock_reaches_them() {
    let mut h = Harness::new(Box::new(Delay { held: vec![] }));
    h.push(
        0,
        rows!(
            "k n
                     a 1"
        ),
    );
    h.advance_proc_time(999);
    assert!(h.take(Port::Main).is_empty());
    h.advance_proc_time(1);
    assert_eq!(sorted_lines(&h.take(Port::Main)), vec!["a,1"]);
}
