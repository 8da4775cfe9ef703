"""The test suite, a package so that its files import shared code as `tests.helpers` / `tests.references`.

Keep this folder off `sys.path` (pytest puts the repository root there, since every folder has an
`__init__.py`): its subpackages are named like installed packages (`kernels`, Hugging Face's, which
transformers imports), which would shadow them.
"""
