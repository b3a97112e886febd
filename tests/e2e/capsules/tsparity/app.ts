// tests/e2e/test_ts_sdk_parity.py and tests/security/test_ts_visibility.py: the TypeScript SDK's
// families, visible filters, size, ctx.updated and async handlers, in one build.
import { Capsule, NotFound, type Context } from '@astrid/sdk';

const NOTES: Record<string, string> = { a: 'note a', b: 'bee' };
const onlyAlice = (ctx: Context) => ctx.principal === 'alice';
const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));
let hits = 0; // per principal: each principal has its own instance

const capsule = new Capsule('parity');

capsule.family(
  'astrid://parity/notes/',
  { mimeType: 'text/plain', list: () => ['a', { key: 'b', title: 'B', size: 3 }, 'not/flat'] },
  (ctx) => {
    if (ctx.key === 'gone') throw new NotFound(ctx.uri);
    return ctx.key in NOTES ? `${NOTES[ctx.key]} for ${ctx.principal}` : `no note ${ctx.key}`;
  },
);
capsule.resource('astrid://parity/sized', { name: 'sized', size: 5 }, () => 'sized');
capsule.resource('astrid://parity/secret', { name: 'secret', visible: onlyAlice }, () => 'for alice only');
capsule.template(
  'astrid://parity/admin/{page}',
  { name: 'admin', visible: onlyAlice, complete: { page: () => ['settings'] } },
  (ctx) => `admin ${ctx.params.page}`,
);
capsule.resource('astrid://parity/hits', { name: 'hits' }, () => String(hits));
capsule.resource('astrid://parity/bump', { name: 'bump' }, (ctx) => {
  hits += 1;
  ctx.updated('astrid://parity/hits');
  return String(hits);
});
capsule.resource('astrid://parity/async', { name: 'async' }, async (ctx) => {
  await Promise.resolve();
  return `awaited for ${ctx.principal}`;
});
capsule.resource('astrid://parity/later', { name: 'later' }, async () => {
  await sleep(20);
  return 'after a timer';
});
capsule.resource('astrid://parity/rejects', { name: 'rejects' }, async () => {
  await Promise.resolve();
  throw new Error('async boom');
});
capsule.resource('astrid://parity/never', { name: 'never' }, () => new Promise<string>(() => {}));
capsule.template(
  'astrid://parity/day/{day}',
  {
    name: 'day',
    complete: { day: async (prefix) => ['monday', 'tuesday'].filter((d) => d.startsWith(prefix)) },
    list: () => [{ uri: 'astrid://parity/day/monday', title: 'Monday' }, 'astrid://parity/elsewhere'],
  },
  (ctx) => `day ${ctx.params.day}`,
);

export const astridHookTrigger = capsule.handler();
