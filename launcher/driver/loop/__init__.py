"""The step loop: the colocated and async loops, one step's pieces (prompts, rollout, partial
rollouts, scoring, training), the prompt stream, held-out evaluation, the rollout checks and
the preemption watch, over the Runtime that holds what a loop works with."""
