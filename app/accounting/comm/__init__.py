"""Communication between GPUs: collectives over links, as nccl-tests measures them."""
