"""Model descriptors (descriptors/*.yaml) and the Megatron implementation of GLM-5.3-Flash (megatron/)."""
