// conformance: the fixture URIs of the official MCP conformance suite, the TypeScript twin of
// ../capsule/app.py (tests/e2e/test_conformance.py runs the same scenarios against both).
// - test://static-text: text/plain, the text `resources-read-text` names;
// - test://static-binary: image/png, a 1x1 PNG (`resources-read-binary` wants a non-empty blob);
// - test://template/{id}/data: `resources-templates-read` reads test://template/123/data;
// - test://watched-resource: what `resources-subscribe` and `resources-unsubscribe` subscribe to.
import { Capsule } from '@astrid/sdk';

const STATIC_TEXT = 'This is the content of the static text resource.';
// A 1x1 red RGBA PNG (70 bytes), the same bytes as the Python fixture's.
const PIXEL_PNG = Uint8Array.from(
  atob('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP4z8DwHwAFAAH/VscvDQAAAABJRU5ErkJggg=='),
  (c) => c.charCodeAt(0),
);

const capsule = new Capsule('conformance');

capsule.resource(
  'test://static-text',
  {
    name: 'static-text',
    title: 'Static text',
    description: 'A static text resource (conformance: resources-read-text)',
    mimeType: 'text/plain',
  },
  () => STATIC_TEXT,
);

capsule.resource(
  'test://static-binary',
  {
    name: 'static-binary',
    title: 'Static binary',
    description: 'A static binary resource, a 1x1 PNG (conformance: resources-read-binary)',
    mimeType: 'image/png',
  },
  () => PIXEL_PNG,
);

capsule.resource(
  'test://watched-resource',
  {
    name: 'watched-resource',
    title: 'Watched resource',
    description: 'A resource to subscribe to (conformance: resources-subscribe, resources-unsubscribe)',
    mimeType: 'text/plain',
  },
  () => 'watched',
);

capsule.template(
  'test://template/{id}/data',
  {
    name: 'template-data',
    title: 'Template data',
    description: 'Data for one id (conformance: resources-templates-read)',
    mimeType: 'application/json',
  },
  (ctx) => JSON.stringify({ id: ctx.params.id, templateTest: true, data: `Data for ID: ${ctx.params.id}` }),
);

// The entry point componentize-js exports; keep this line last.
export const astridHookTrigger = capsule.handler();
