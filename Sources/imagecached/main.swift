print("imagecached skeleton")
