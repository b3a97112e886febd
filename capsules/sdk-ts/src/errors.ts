// Errors an author throws on purpose (HostError and NotGranted, thrown by the host calls, are in capabilities.ts).

/** "No such resource": the SDK stays silent, so the client sees "resource not found", not an error. */
export class NotFound extends Error {
  constructor(uri = '') {
    super(uri ? `no resource ${uri}` : 'no such resource');
    this.name = 'NotFound';
  }
}
