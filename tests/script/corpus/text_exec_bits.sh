#!/bin/bash
# File modes: chmod of made files and scripts, a helper run through its path.
printf '#!/bin/bash\necho "run by helper" > helper_out.txt\n' > helper.sh
chmod 755 helper.sh
./helper.sh
echo secret > private.txt
chmod 600 private.txt
mkdir -p shared
chmod 775 shared
cp helper.sh shared/
cat helper_out.txt
