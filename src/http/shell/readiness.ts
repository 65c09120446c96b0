/**
 * Readiness, apart from liveness: /health says the process answers; /ready says send traffic
 * here. Not ready until the app has started (model loaded and warmed up) and not ready again
 * from the moment a drain begins, so a load balancer stops routing before the port closes.
 */
export class Readiness {
  private started = false;
  private draining = false;
  /** An extra condition set by the owner (the server entry: every app is listening). */
  private gate: () => boolean = () => true;

  get ready(): boolean {
    return this.started && !this.draining && this.gate();
  }

  markStarted(): void {
    this.started = true;
    this.draining = false;
  }

  markDraining(): void {
    this.draining = true;
  }

  setGate(gate: () => boolean): void {
    this.gate = gate;
  }
}
