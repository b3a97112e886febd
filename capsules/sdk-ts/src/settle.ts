// Settling a handler's Promise within the call. componentize-js runs the component's event loop until the
// export's Promise settles, and traps when the loop runs dry first (a Promise nothing will ever settle).
// So the SDK watches, one microtask at a time: while the author has a timer pending it waits for it (the
// host's call window still bounds the wait); with none, only microtasks can settle the Promise, and one
// still pending after SPIN_MS of them never will: it becomes a read error, well inside the 2 s window.
// (A microtask costs tens of microseconds here: an `await` loop of some 10,000 steps fits.) No timer
// of the SDK's own: none competes with the author's.
type TimerId = ReturnType<typeof setTimeout>;

/** How long a Promise may take on microtasks alone (no timer pending) before it counts as never settling. */
export const SPIN_MS = 750;
/** Look at the clock once per this many microtasks (it is a host call). */
const CLOCK_EVERY = 256;
const pending = new Set<TimerId>();
let waiters: (() => void)[] = [];

/** Rejected with this when the Promise is still pending with nothing left to wait for. */
export class Unsettled extends Error {}

function afterTimer(): void {
  const woken = waiters;
  waiters = [];
  for (const wake of woken) queueMicrotask(wake);
}

// Count the author's timers (the SDK is bundled before the author's code runs, so every timer is seen).
const realSetTimeout = globalThis.setTimeout;
const realClearTimeout = globalThis.clearTimeout;
const realSetInterval = globalThis.setInterval;
const realClearInterval = globalThis.clearInterval;
if (typeof realSetTimeout === 'function') {
  globalThis.setTimeout = ((callback: (...args: unknown[]) => void, ms?: number, ...args: unknown[]) => {
    const id: TimerId = realSetTimeout(() => {
      pending.delete(id);
      try {
        if (typeof callback === 'function') callback(...args);
      } finally {
        afterTimer();
      }
    }, ms);
    pending.add(id);
    return id;
  }) as typeof setTimeout;
  globalThis.clearTimeout = ((id: TimerId) => {
    pending.delete(id);
    realClearTimeout(id);
    afterTimer();
  }) as typeof clearTimeout;
}
if (typeof realSetInterval === 'function') {
  globalThis.setInterval = ((callback: (...args: unknown[]) => void, ms?: number, ...args: unknown[]) => {
    const id: TimerId = realSetInterval(() => {
      try {
        if (typeof callback === 'function') callback(...args);
      } finally {
        afterTimer();
      }
    }, ms);
    pending.add(id);
    return id;
  }) as typeof setInterval;
  globalThis.clearInterval = ((id: TimerId) => {
    pending.delete(id);
    realClearInterval(id);
    afterTimer();
  }) as typeof clearInterval;
}

/** `promise` settled, or rejected with Unsettled(`never`) once it has spun SPIN_MS with no timer pending. */
export function settle<T>(promise: PromiseLike<T>, never: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let done = false;
    Promise.resolve(promise).then(
      (value) => {
        done = true;
        resolve(value);
      },
      (error) => {
        done = true;
        reject(error);
      },
    );
    let rounds = 0;
    let since = Date.now();
    const check = (): void => {
      if (done) return;
      if (pending.size > 0) {
        waiters.push(() => {
          since = Date.now(); // a timer ran: the Promise may settle on microtasks again
          check();
        });
      } else if (++rounds % CLOCK_EVERY !== 0 || Date.now() - since < SPIN_MS) {
        queueMicrotask(check);
      } else {
        done = true;
        reject(new Unsettled(never));
      }
    };
    queueMicrotask(check);
  });
}
