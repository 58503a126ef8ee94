"""Image classification: batches of images sent as tensors or encoded files, priced per thousand images. What an image
request carries: its formats (`formats.py`), the corpus and each client's pool of distinct requests (`corpus.py`,
`synthetic.py`), the one preprocessing every JPEG path runs (`preprocessing.py`), the JSON API of base64 JPEGs
(`json_images.py`); its figures and their declarations (`figures.py`), and its `Workload` (`workload.py`)."""
