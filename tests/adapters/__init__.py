"""Model adapters: attention layouts, the KV caches, batching and the speed levers."""
