// The astrid capsule SDK for TypeScript and JavaScript: `import { Capsule } from '@astrid/sdk';`.
export {
  Capsule,
  type Completer,
  type FamilyOptions,
  type Handler,
  type Lister,
  type Member,
  type ResourceOptions,
  type TemplateOptions,
  type Visible,
} from './capsule.js';
export { Context } from './context.js';
export { NotFound } from './errors.js';
export type { Described, Result } from './wire.js';
export { HostError, NotGranted, Response, type Entry, type RequestOptions, type Stat } from './capabilities.js';
