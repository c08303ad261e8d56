"""Models on disk: the catalog, each model's description, the models folder, downloads, starters.

- `catalog`: the families and the models Tessera knows by id (resources/models/catalog.json);
- `contracts`: a model's one typed description, read from its ONNX graph (no session);
- `inventory`: resolving an id or a path, what is in the models folder, installing a file;
- `downloads`: resumable, verified downloads of catalog models;
- `starter` and `ncnn`: the offline starter models, converted from ncnn by our own converter;
- `cli`: `python -m engine models …`.
Nothing here creates a session except `starter`, which checks a converted model by running it.
"""
