// Settling a handler's Promise within the call. componentize-js runs the component's event loop until the
// export's Promise settles, and traps when the loop runs dry first (a Promise nothing will ever settle).
// So the SDK watches: while the author has a timer pending it waits for it (the host's call window still
// bounds the wait); with none, a Promise still pending after a long run of microtasks can never settle,
// and becomes a read error at once. No timer of the SDK's own: none competes with the author's.
type TimerId = ReturnType<typeof setTimeout>;

/** Microtask rounds a Promise may take with no timer pending (an `await` chain costs a few each). */
const ROUNDS = 10_000;
const pending = new Set<TimerId>();
let waiters: (() => void)[] = [];

/** Rejected with this when the Promise can never settle. */
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

/** `promise` settled, or rejected with Unsettled(`never`) once nothing is left that could settle it. */
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
    const check = (): void => {
      if (done) return;
      if (pending.size > 0) {
        rounds = 0;
        waiters.push(check); // look again once one of the author's timers has run
      } else if (++rounds < ROUNDS) {
        queueMicrotask(check);
      } else {
        done = true;
        reject(new Unsettled(never));
      }
    };
    queueMicrotask(check);
  });
}
