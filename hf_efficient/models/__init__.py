"""Everything a saved checkpoint needs: configs, the shared encoder, the attention mechanisms.

Files here import only torch, transformers and each other (single-dot imports), because a folder
written by `save_pretrained` carries them as custom code for `trust_remote_code=True`.
"""
