"""glmserve: launch, watch, benchmark and compare SGLang server configurations."""

__version__ = "0.1.0"
