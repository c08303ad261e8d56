"""Models and images built on the spot with onnx.helper and numpy (no download, no hub): the
bench measures with them, and the tests use them everywhere. Nothing else imports them."""
