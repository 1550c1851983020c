"""Language models: engines and factory (models), the llama.cpp KV cache (kv_cache), LM-call plumbing (calls), the prompt-prefix cache accounting (prefix_cache)."""
